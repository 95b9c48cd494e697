//! The parent's handle on a worker process (one arm each, rule 3): spawn `rcpu-bench __worker`,
//! send requests, read replies, watch its CPU time from /proc.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use serde_json::{json, Value};

/// Which runtime an arm uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArmKind {
    Ort,
    Rcpu,
}

impl ArmKind {
    pub fn name(&self) -> &'static str {
        match self {
            ArmKind::Ort => "ort",
            ArmKind::Rcpu => "rcpu",
        }
    }
}

/// Everything a worker needs to start.
#[derive(Debug, Clone)]
pub struct WorkerCfg {
    pub threads: usize,
    pub cpus: Vec<usize>,
    pub model_path: String,
    pub m: usize,
    pub seed: u64,
    /// ORT's own session options of this arm (intra-op threads, spinning); default: the arm's.
    pub ort: super::ort_opts::OrtOpts,
}

impl WorkerCfg {
    /// This configuration with ORT's session options `ort`.
    pub fn with_ort(&self, ort: super::ort_opts::OrtOpts) -> WorkerCfg {
        WorkerCfg {
            ort,
            ..self.clone()
        }
    }
}

pub struct Worker {
    pub label: String,
    pub kind: ArmKind,
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Worker {
    pub fn spawn(label: &str, kind: ArmKind, cfg: &WorkerCfg) -> Result<Worker, String> {
        Self::spawn_with(label, kind, cfg, None, &[], &[])
    }

    /// [`Worker::spawn`], the rcpu arm loading `plugin` (`RCPU_PLUGIN` of the worker) when given,
    /// the worker's environment extended by `env`, its rcpu session given the provider options
    /// `opts` besides `threads`.
    pub fn spawn_with(
        label: &str,
        kind: ArmKind,
        cfg: &WorkerCfg,
        plugin: Option<&str>,
        env: &[(String, String)],
        opts: &[(String, String)],
    ) -> Result<Worker, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let cpus: Vec<String> = cfg.cpus.iter().map(|c| c.to_string()).collect();
        let mut cmd = Command::new(exe);
        cmd.envs(env.iter().map(|(k, v)| (k, v)));
        if let Some(p) = plugin {
            if !std::path::Path::new(p).exists() {
                return Err(format!("--null-plugin {p}: no such file"));
            }
            cmd.env("RCPU_PLUGIN", p);
        }
        let mut child = cmd
            .args([
                "__worker",
                "--arm",
                kind.name(),
                "--threads",
                &cfg.threads.to_string(),
            ])
            .args(["--cpus", &cpus.join(","), "--model", &cfg.model_path])
            .args(["--m", &cfg.m.to_string(), "--seed", &cfg.seed.to_string()])
            .args(cfg.ort.worker_args())
            .args(
                opts.iter()
                    .flat_map(|(k, v)| ["--rcpu-opt".to_string(), format!("{k}={v}")]),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("spawning worker: {e}"))?;
        let stdin = child.stdin.take().ok_or("no worker stdin")?;
        let stdout = BufReader::new(child.stdout.take().ok_or("no worker stdout")?);
        Ok(Worker {
            label: label.into(),
            kind,
            child,
            stdin,
            stdout,
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `req` and waits for its reply.
    pub fn call(&mut self, req: Value) -> Result<Value, String> {
        writeln!(self.stdin, "{req}").map_err(|e| format!("{}: worker gone ({e})", self.label))?;
        self.stdin.flush().map_err(|e| e.to_string())?;
        let mut line = String::new();
        loop {
            line.clear();
            let n = self
                .stdout
                .read_line(&mut line)
                .map_err(|e| e.to_string())?;
            if n == 0 {
                return Err(format!(
                    "{}: worker exited before replying to {req}",
                    self.label
                ));
            }
            if let Some(j) = line.strip_prefix("@@ ") {
                let v: Value =
                    serde_json::from_str(j).map_err(|e| format!("bad worker reply: {e}"))?;
                if let Some(e) = v.get("err") {
                    return Err(format!("{}: {}", self.label, e.as_str().unwrap_or("?")));
                }
                return Ok(v["ok"].clone());
            }
        }
    }

    pub fn cmd(&mut self, cmd: &str) -> Result<Value, String> {
        self.call(json!({"cmd": cmd}))
    }

    /// Waits (up to `max_ms`) until this worker's process stops using CPU (ORT's pool threads spin
    /// after a run); returns the milliseconds waited. Quiet = no CPU tick over three 10 ms polls.
    pub fn settle(&self, max_ms: u64) -> f64 {
        let t = std::time::Instant::now();
        let mut last = self.cpu_s();
        let mut quiet = 0;
        while t.elapsed().as_millis() < max_ms as u128 && quiet < 3 {
            std::thread::sleep(std::time::Duration::from_millis(10));
            let now = self.cpu_s();
            quiet = if now == last { quiet + 1 } else { 0 };
            last = now;
        }
        t.elapsed().as_secs_f64() * 1e3
    }

    /// utime + stime of the whole worker (all threads), seconds.
    pub fn cpu_s(&self) -> f64 {
        super::conditions::process_cpu_s(self.pid())
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = writeln!(self.stdin, "{}", json!({"cmd": "quit"}));
        let _ = self.stdin.flush();
        let _ = self.child.wait();
    }
}

/// The null arm of `compare` / `llm`: a twin of `kind` (with the rcpu arm's `--rcpu-ort`
/// options when it is rcpu), or (`--null-plugin SO`) rcpu loading another plugin build, which
/// turns `null_b_over_a` into an old/new ratio, or (`--null-ort OPTS`) the twin under other ORT
/// session options, which turns it into a with/without ratio of those options.
pub fn null_worker(
    o: &super::args::Opts,
    kind: ArmKind,
    cfg: &WorkerCfg,
) -> Result<Worker, String> {
    let twin_ort = if kind == ArmKind::Rcpu {
        o.rcpu_ort
    } else {
        cfg.ort
    };
    let cfg = &cfg.with_ort(o.null_ort.unwrap_or(twin_ort));
    if let Some(n) = o.null_ort {
        println!(
            "null arm: {} with ORT options {} (the other {} arm: {}); null_b_over_a = that / this \
             (per round), not an A/A band",
            kind.name(),
            n.label(),
            kind.name(),
            if twin_ort.label().is_empty() {
                "the arm's defaults".to_string()
            } else {
                twin_ort.label()
            }
        );
    }
    if !o.null_opts.is_empty() {
        if kind == ArmKind::Ort {
            return Err("--null-opt needs the null arm to be rcpu (not --null ort)".into());
        }
        let opts: Vec<String> = o
            .null_opts
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        println!(
            "null arm: rcpu with provider options {}; null_b_over_a = that / this (per round), not \
             an A/A band",
            opts.join(" ")
        );
    }
    if !o.null_env.is_empty() {
        let vars: Vec<String> = o.null_env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!(
            "null arm: its process has {}; null_b_over_a = that / this (per round), not an A/A band",
            vars.join(" ")
        );
    }
    match &o.null_plugin {
        None => Worker::spawn_with(
            &format!("null({})", o.null_arm),
            kind,
            cfg,
            None,
            &o.null_env,
            &o.null_opts,
        ),
        Some(_) if kind == ArmKind::Ort => {
            Err("--null-plugin needs the null arm to be rcpu (not --null ort)".into())
        }
        Some(p) => {
            println!(
                "null arm: rcpu loading {p}; null_b_over_a = that build / this build (per round), \
                 not an A/A band"
            );
            Worker::spawn_with(
                &format!("null(rcpu {p})"),
                kind,
                cfg,
                Some(p),
                &o.null_env,
                &o.null_opts,
            )
        }
    }
}
