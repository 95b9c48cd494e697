//! The command line: `rcpu-bench SUBCOMMAND [MODEL] [--flag value ...]`, parsed by hand; every
//! subcommand accepts only its own flags and every bad flag or value is a clear error.

use super::worker::WorkerArgs;

pub const USAGE: &str = "\
rcpu-bench: side-by-side ORT CPU EP vs rcpu, under the rules of docs/benchmarking.md

  rcpu-bench compare MODEL|--gen SPEC [--threads N] [--cpus LIST] [--rounds R] [--iters I] [--warmup W]
                     [--null rcpu|ort] [--null-plugin SO] [--tol X] [--steady-k K] [--steady-tol X] [--m M]
                     [--json FILE]
  rcpu-bench gap     MODEL|--gen SPEC --gap-us G [--busy] [--tokens T] [--sweep G1,G2,..] [--svg FILE]
                     [--threads N] [--cpus LIST] [--json FILE]
  rcpu-bench cold    MODEL|--gen SPEC [--samples S] [--threads N] [--cpus LIST] [--json FILE]
  rcpu-bench census  [MODEL|--gen SPEC] [--threads N] [--cpus LIST] [--json FILE]
  rcpu-bench llm     --gen llm:preset=qwen2-0.5b|llama-3.2-1b[,...] [--mode decode,generate,prefill]
                     [--past P] [--tokens T] [--prompt 64,512] [--layers N] [--vocab V] [--profile-iters I]
                     [--threads N] [--cpus LIST] [--rounds R] [--iters I] [--warmup W] [--null rcpu|ort]
                     [--null-plugin SO] [--tol X] [--json FILE]   (whole-model decode / generation /
                     prefill, per token)
  rcpu-bench gen     SPEC --out FILE.onnx   (llm specs also write genai_config.json beside FILE)
  rcpu-bench demo    [--gen llm:...] [--prompt P] [--tokens T] [--rounds R] [--layers N] [--vocab V]
                     [--svg FILE] [--threads N] [--cpus LIST] [--null rcpu|ort] [--tol X] [--json FILE]
                     (greedy generation on ORT vs rcpu vs a null arm; default --gen llm:preset=qwen2-0.5b,acc=4
                     --prompt 64 --tokens 24 --rounds 5 --svg target/demo/latency.svg)

--null-plugin SO: the null arm is rcpu loading the plugin SO (e.g. an older build copied aside), so
                  null_b_over_a is old/new; the A/A band then needs a run without it.
Exit codes: 0 ok (compare, demo: a headline), 1 error, 2 bad arguments or parity mismatch (nothing
            timed), 3 compare ran but steady state was NOT REACHED (no headline).
SPEC: nbits:k=4096,n=4096,layers=1,block=32,acc=4,m=1[,zp=0|1][,sym]   or   matmul:k=2048,n=2048,m=1[,layers=L]
      or llm:preset=qwen2-0.5b,layers=24,vocab=151936,tied=1,acc=4,block=32,seed=1[,ctx=4096][,emb=q4|f32|f16]
";

#[derive(Debug, Clone, PartialEq)]
pub struct Opts {
    pub model: Option<String>,
    pub gen: Option<String>,
    pub threads: Option<usize>,
    pub cpus: Option<Vec<usize>>,
    pub rounds: usize,
    pub iters: usize,
    pub warmup: usize,
    pub null_arm: String,
    /// `--null-plugin PATH`: the null arm is rcpu loading this plugin build (old vs new A/B).
    pub null_plugin: Option<String>,
    pub tol: Option<f64>,
    pub steady_k: usize,
    pub steady_tol: f64,
    pub m: Option<usize>,
    pub json: Option<String>,
    pub gap_us: Option<u64>,
    pub busy: bool,
    pub tokens: usize,
    pub sweep: Vec<u64>,
    pub svg: Option<String>,
    pub samples: usize,
    pub out: Option<String>,
    pub seed: u64,
    /// llm: what to run (decode, generate, prefill), past length, prefill lengths, overrides.
    pub modes: Vec<String>,
    pub past: usize,
    pub prompts: Vec<usize>,
    pub layers: Option<usize>,
    pub vocab: Option<usize>,
    pub profile_iters: usize,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            model: None,
            gen: None,
            threads: None,
            cpus: None,
            rounds: 12,
            iters: 20,
            warmup: 5,
            null_arm: "rcpu".into(),
            null_plugin: None,
            tol: None,
            steady_k: 3,
            steady_tol: 0.05,
            m: None,
            json: None,
            gap_us: None,
            busy: false,
            tokens: 100,
            sweep: vec![],
            svg: None,
            samples: 5,
            out: None,
            seed: 42,
            modes: vec!["decode".into(), "generate".into(), "prefill".into()],
            past: 64,
            prompts: vec![64, 512],
            layers: None,
            vocab: None,
            profile_iters: 3,
        }
    }
}

#[derive(Debug)]
pub enum Cmd {
    Compare(Opts),
    Gap(Opts),
    Cold(Opts),
    Census(Opts),
    Gen(Opts),
    Llm(Opts),
    Demo(Opts),
    Worker(WorkerArgs),
    Help,
}

const COMMON: &[&str] = &["--gen", "--threads", "--cpus", "--json", "--m", "--seed"];
const COMPARE: &[&str] = &[
    "--rounds",
    "--iters",
    "--warmup",
    "--null",
    "--null-plugin",
    "--tol",
    "--steady-k",
    "--steady-tol",
];
const GAP: &[&str] = &["--gap-us", "--busy", "--tokens", "--sweep", "--svg"];
const DEMO: &[&str] = &[
    "--rounds",
    "--null",
    "--tol",
    "--steady-k",
    "--steady-tol",
    "--prompt",
    "--tokens",
    "--layers",
    "--vocab",
    "--svg",
];
const LLM: &[&str] = &[
    "--mode",
    "--past",
    "--tokens",
    "--prompt",
    "--layers",
    "--vocab",
    "--profile-iters",
];

fn allowed(sub: &str) -> Vec<&'static str> {
    let mut v: Vec<&str> = COMMON.to_vec();
    match sub {
        "compare" => v.extend(COMPARE),
        "demo" => v.extend(DEMO),
        "gap" => v.extend(GAP),
        "llm" => {
            v.extend(COMPARE);
            v.extend(LLM);
        }
        "cold" => v.push("--samples"),
        "gen" => v = vec!["--out"],
        _ => {}
    }
    v
}

const LLM_MODES: [&str; 3] = ["decode", "generate", "prefill"];

fn num<T: std::str::FromStr>(flag: &str, v: &str, what: &str) -> Result<T, String> {
    v.parse()
        .map_err(|_| format!("{flag}: '{v}' is not {what}"))
}

fn positive(flag: &str, v: &str) -> Result<usize, String> {
    match num::<usize>(flag, v, "a positive integer")? {
        0 => Err(format!("{flag}: must be positive, got 0")),
        n => Ok(n),
    }
}

pub fn parse_cpus(flag: &str, v: &str) -> Result<Vec<usize>, String> {
    let mut out = vec![];
    for part in v.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) =
                    (num(flag, a, "a CPU number")?, num(flag, b, "a CPU number")?);
                if b < a {
                    return Err(format!("{flag}: bad range '{part}'"));
                }
                out.extend(a..=b);
            }
            None => out.push(num(flag, part, "a CPU number")?),
        }
    }
    if out.is_empty() {
        return Err(format!("{flag}: empty CPU list"));
    }
    Ok(out)
}

pub fn parse(argv: &[String]) -> Result<Cmd, String> {
    let Some(sub) = argv.first() else {
        return Ok(Cmd::Help);
    };
    let rest = &argv[1..];
    match sub.as_str() {
        "-h" | "--help" | "help" => return Ok(Cmd::Help),
        "__worker" => return parse_worker(rest),
        "compare" | "gap" | "cold" | "census" | "gen" | "demo" | "llm" => {}
        other => {
            return Err(format!(
                "unknown subcommand '{other}' (compare|gap|cold|census|gen|demo|llm)\n\n{USAGE}"
            ))
        }
    }
    if rest.iter().any(|a| a == "--help" || a == "-h") {
        return Ok(Cmd::Help);
    }
    let ok = allowed(sub);
    let mut o = Opts::default();
    let mut i = 0;
    while i < rest.len() {
        let a = &rest[i];
        i += 1;
        if !a.starts_with("--") {
            if o.model.is_some() {
                return Err(format!("{sub}: unexpected extra argument '{a}'"));
            }
            o.model = Some(a.clone());
            continue;
        }
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (a.clone(), None),
        };
        if !ok.contains(&flag.as_str()) {
            return Err(format!(
                "{sub}: unknown flag '{flag}' (accepted: {})",
                ok.join(" ")
            ));
        }
        if flag == "--busy" {
            o.busy = true;
            continue;
        }
        let v = match inline {
            Some(v) => v,
            None => {
                let v = rest
                    .get(i)
                    .filter(|v| !v.starts_with("--"))
                    .ok_or(format!("{flag} needs a value"))?;
                i += 1;
                v.clone()
            }
        };
        match flag.as_str() {
            "--gen" => o.gen = Some(v),
            "--threads" => o.threads = Some(positive(&flag, &v)?),
            "--cpus" => o.cpus = Some(parse_cpus(&flag, &v)?),
            "--json" => o.json = Some(v),
            "--m" => o.m = Some(positive(&flag, &v)?),
            "--seed" => o.seed = num(&flag, &v, "an integer")?,
            "--rounds" => o.rounds = positive(&flag, &v)?,
            "--iters" => o.iters = positive(&flag, &v)?,
            "--warmup" => o.warmup = num(&flag, &v, "an integer")?,
            "--null" if v == "rcpu" || v == "ort" => o.null_arm = v,
            "--null" => return Err(format!("--null: '{v}' must be rcpu or ort")),
            "--null-plugin" => o.null_plugin = Some(v),
            "--tol" => o.tol = Some(num(&flag, &v, "a number")?),
            "--steady-k" => o.steady_k = positive(&flag, &v)?,
            "--steady-tol" => o.steady_tol = num(&flag, &v, "a number")?,
            "--gap-us" => o.gap_us = Some(num(&flag, &v, "a number of microseconds")?),
            "--tokens" => o.tokens = positive(&flag, &v)?,
            "--sweep" => {
                o.sweep = v
                    .split(',')
                    .map(|g| num(&flag, g, "a list of microseconds"))
                    .collect::<Result<_, _>>()?
            }
            "--svg" => o.svg = Some(v),
            "--samples" => o.samples = positive(&flag, &v)?,
            "--out" => o.out = Some(v),
            "--mode" => {
                o.modes = v.split(',').map(String::from).collect();
                if let Some(m) = o.modes.iter().find(|m| !LLM_MODES.contains(&m.as_str())) {
                    return Err(format!("--mode: '{m}' is not decode, generate or prefill"));
                }
            }
            "--past" => o.past = num(&flag, &v, "an integer")?,
            "--prompt" => {
                o.prompts = v
                    .split(',')
                    .map(|p| positive(&flag, p))
                    .collect::<Result<_, _>>()?
            }
            "--layers" => o.layers = Some(positive(&flag, &v)?),
            "--vocab" => o.vocab = Some(positive(&flag, &v)?),
            "--profile-iters" => o.profile_iters = num(&flag, &v, "an integer")?,
            _ => unreachable!("flag listed in allowed() but not handled: {flag}"),
        }
    }
    if sub == "gen" {
        // `gen SPEC --out FILE`: the positional is the spec.
        o.gen = o.model.take();
        if o.gen.is_none() || o.out.is_none() {
            return Err("gen: usage `rcpu-bench gen SPEC --out FILE.onnx`".into());
        }
        return Ok(Cmd::Gen(o));
    }
    if o.model.is_some() && o.gen.is_some() {
        return Err(format!("{sub}: give MODEL or --gen SPEC, not both"));
    }
    let needs_model = !matches!(sub.as_str(), "census" | "demo");
    if needs_model && o.model.is_none() && o.gen.is_none() {
        return Err(format!("{sub}: needs MODEL or --gen SPEC"));
    }
    if sub == "llm" {
        if !o.gen.as_deref().is_some_and(|g| g.starts_with("llm:")) {
            return Err("llm: needs --gen llm:preset=...".into());
        }
        if !rest.iter().any(|a| a.starts_with("--tokens")) {
            o.tokens = 32;
        }
        if !rest.iter().any(|a| a.starts_with("--rounds")) {
            o.rounds = 6;
        }
        if !rest.iter().any(|a| a.starts_with("--iters")) {
            o.iters = 10;
        }
        return Ok(Cmd::Llm(o));
    }
    if sub == "demo" {
        let given = |f: &str| {
            rest.iter()
                .any(|a| a == f || a.starts_with(&format!("{f}=")))
        };
        if !given("--prompt") {
            o.prompts = vec![64];
        }
        if o.prompts.len() != 1 {
            return Err("demo: --prompt takes one length".into());
        }
        if !given("--tokens") {
            o.tokens = 24;
        }
        if !given("--rounds") {
            o.rounds = 5;
        }
        return Ok(Cmd::Demo(o));
    }
    if sub == "gap" && o.gap_us.is_none() && o.sweep.is_empty() {
        return Err("gap: needs --gap-us G or --sweep G1,G2,...".into());
    }
    Ok(match sub.as_str() {
        "compare" => Cmd::Compare(o),
        "gap" => Cmd::Gap(o),
        "cold" => Cmd::Cold(o),
        _ => Cmd::Census(o),
    })
}

fn parse_worker(rest: &[String]) -> Result<Cmd, String> {
    let mut w = WorkerArgs {
        arm: String::new(),
        threads: 1,
        cpus: vec![],
        model: String::new(),
        m: 1,
        seed: 0,
    };
    for pair in rest.chunks(2) {
        let [flag, v] = pair else {
            return Err("__worker: odd arguments".into());
        };
        match flag.as_str() {
            "--arm" => w.arm = v.clone(),
            "--threads" => w.threads = positive(flag, v)?,
            "--cpus" => w.cpus = parse_cpus(flag, v)?,
            "--model" => w.model = v.clone(),
            "--m" => w.m = positive(flag, v)?,
            "--seed" => w.seed = num(flag, v, "an integer")?,
            _ => return Err(format!("__worker: unknown flag '{flag}'")),
        }
    }
    Ok(Cmd::Worker(w))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Cmd, String> {
        parse(&s.split_whitespace().map(String::from).collect::<Vec<_>>())
    }

    #[test]
    fn parses_a_full_compare() {
        let Cmd::Compare(o) = p(
            "compare --gen nbits:k=64,n=64 --threads 2 --rounds 7 --iters=9 --cpus 0-1 --null ort",
        )
        .unwrap() else {
            panic!("not compare")
        };
        assert_eq!((o.threads, o.rounds, o.iters), (Some(2), 7, 9));
        assert_eq!(o.cpus, Some(vec![0, 1]));
        assert_eq!(o.null_arm, "ort");
        assert!(
            matches!(p("gap m.onnx --gap-us 500 --busy").unwrap(), Cmd::Gap(o) if o.busy && o.gap_us == Some(500))
        );
        assert!(matches!(
            p("gen nbits:k=64,n=64 --out x.onnx").unwrap(),
            Cmd::Gen(_)
        ));
        assert!(matches!(p("demo --help").unwrap(), Cmd::Help));
        let Cmd::Demo(d) = p("demo --tokens 8 --vocab 1000").unwrap() else {
            panic!("not demo")
        };
        assert_eq!(
            (d.prompts.clone(), d.tokens, d.rounds, d.vocab),
            (vec![64], 8, 5, Some(1000))
        );
        let Cmd::Llm(o) =
            p("llm --gen llm:preset=qwen2-0.5b --null-plugin /tmp/old.so --mode decode").unwrap()
        else {
            panic!("not llm")
        };
        assert_eq!(o.null_plugin.as_deref(), Some("/tmp/old.so"));
        assert!(p("gap m.onnx --gap-us 5 --null-plugin x.so").is_err());
        let Cmd::Llm(o) =
            p("llm --gen llm:preset=qwen2-0.5b --mode decode,prefill --prompt 8,16 --layers 2")
                .unwrap()
        else {
            panic!("not llm")
        };
        assert_eq!(
            (o.modes.len(), o.prompts.clone(), o.layers),
            (2, vec![8, 16], Some(2))
        );
        assert_eq!((o.tokens, o.rounds, o.iters, o.past), (32, 6, 10, 64));
    }

    #[test]
    fn rejects_bad_flags_with_clear_messages() {
        let cases = [
            ("compare m.onnx --thread 2", "unknown flag '--thread'"),
            ("compare m.onnx --threads", "--threads needs a value"),
            (
                "compare m.onnx --threads abc",
                "--threads: 'abc' is not a positive integer",
            ),
            ("compare m.onnx --threads 0", "--threads: must be positive"),
            ("compare m.onnx --gap-us 5", "unknown flag '--gap-us'"),
            ("compare", "needs MODEL or --gen SPEC"),
            ("compare a.onnx --gen nbits:k=1,n=1", "not both"),
            ("gap m.onnx", "needs --gap-us"),
            ("compare m.onnx --cpus 3-1", "bad range"),
            ("compare m.onnx --null xyz", "must be rcpu or ort"),
            ("frobnicate", "unknown subcommand 'frobnicate'"),
            ("gen nbits:k=1,n=1", "usage"),
            ("llm --gen nbits:k=1,n=1", "needs --gen llm:"),
            (
                "llm --gen llm:preset=qwen2-0.5b --mode fly",
                "is not decode",
            ),
            ("llm --gen llm: --prompt 64,0", "must be positive"),
            ("demo --prompt 8,16", "one length"),
            ("demo --iters 3", "unknown flag '--iters'"),
        ];
        for (line, want) in cases {
            match p(line) {
                Ok(c) => panic!("`{line}` was accepted: {c:?}"),
                Err(e) => assert!(e.contains(want), "`{line}`: error '{e}' lacks '{want}'"),
            }
        }
    }
}
