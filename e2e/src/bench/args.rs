//! The command line: `rcpu-bench SUBCOMMAND [MODEL] [--flag value ...]`, parsed with clap (one
//! struct per subcommand, `--help` generated). Every subcommand accepts only its own flags;
//! every bad flag or value is a clear error (exit code 2). The parsed command is turned into
//! [`Opts`], the one options record the subcommands read.

use clap::{Args, Parser, Subcommand};

use super::worker::WorkerArgs;

/// Text after the generated `--help`: the SPEC grammar, exit codes and `--null-plugin`.
const AFTER_HELP: &str = "\
Rules: docs/benchmarking.md. MODEL is an .onnx file; --gen SPEC generates one instead.

SPEC: nbits:k=4096,n=4096,layers=1,block=32,acc=4,m=1[,zp=0|1][,sym][,bits=8 (with sym)]
      or matmul:k=2048,n=2048,m=1[,layers=L]
      or mixed:k=4096,n=4096,layers=4,block=32,acc=4,m=1 (per layer an int4 MatMulNBits on rcpu and
         an int8 DynamicQuantizeMatMul left to ORT's CPU EP)
      or glue:op=skipnorm|mul|sigmoid|mix,n=896,layers=64,m=1 (a chain of small glue nodes only)
      or llm:preset=qwen2-0.5b,layers=24,vocab=151936,tied=1,acc=4,block=32,seed=1[,ctx=4096][,emb=q4|q8|f32|f16]
         [,window=W[,window_cache=0]][,softcap=X][,rot=R][,lm_bits=8][,mix8=1]
         [,kvq=int8|int8c|int4c] (sliding-window layers, an attention softcap, R rotated dims of
         each head, an 8-bit lm_head, 8-bit o_proj and MLP, a quantized KV cache: int8 per tensor,
         int8 / 4-bit per channel)
      or llm:preset=gpt-oss-20b|phi3.5-moe[,layers=N][,experts=E][,topk=K][,qmoe_block=32]
         [,sinks=0][,fc3=0] (a QMoE mixture of experts per layer; gpt-oss needs `llm --kv shared`;
         past 2 GiB the weights go to F.onnx.data beside the model)
      (llm specs are benchmarked with `llm` and `demo`; `gen` also writes genai_config.json)

--null-plugin SO: the null arm is rcpu loading the plugin SO (e.g. an older build copied aside), so
                  null_b_over_a is old/new; the A/A band then needs a run without it.
--rcpu-ort / --null-ort intra=N,spin=0|1: ORT's own intra-op threads (0: ORT's default) and
                  session.intra_op.allow_spinning of the rcpu arm / the null arm; with a mixed:
                  model, --rcpu-ort intra=0 --null-ort intra=0,spin=0 makes null_b_over_a
                  spin-off / spin-on.
--null-opt KEY=VALUE: an rcpu provider option of the null arm's session (repeatable), so
                  null_b_over_a is with / without it, e.g. --null-opt acc4_scales=f32.

Exit codes: 0 ok (compare, demo: a headline), 1 error, 2 bad arguments or parity mismatch (nothing
            timed), 3 compare ran but steady state was NOT REACHED (no headline).";

#[derive(Debug, Parser)]
#[command(
    name = "rcpu-bench",
    about = "rcpu-bench: side-by-side ORT CPU EP vs rcpu, under the rules of docs/benchmarking.md",
    after_help = AFTER_HELP
)]
struct Cli {
    #[command(subcommand)]
    sub: Option<Sub>,
}

#[derive(Debug, Subcommand)]
enum Sub {
    /// Steady-state latency of one model: ORT CPU EP vs rcpu vs a null arm, interleaved rounds.
    #[command(after_help = AFTER_HELP)]
    Compare {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        arms: ArmFlags,
    },
    /// Latency after an idle gap between calls (workers parked or spinning).
    #[command(after_help = AFTER_HELP)]
    Gap {
        #[command(flatten)]
        common: Common,
        /// Idle gap between calls, microseconds.
        #[arg(long, value_name = "G")]
        gap_us: Option<u64>,
        /// Keep the calling thread busy during the gap instead of sleeping.
        #[arg(long)]
        busy: bool,
        /// Calls per gap setting.
        #[arg(long, value_name = "T", default_value_t = 100, value_parser = positive)]
        tokens: usize,
        /// Several gaps, microseconds.
        #[arg(long, value_name = "G1,G2,..", value_delimiter = ',')]
        sweep: Vec<u64>,
        /// Plot of the sweep.
        #[arg(long, value_name = "FILE")]
        svg: Option<String>,
    },
    /// First-call latency in fresh processes.
    #[command(after_help = AFTER_HELP)]
    Cold {
        #[command(flatten)]
        common: Common,
        /// Fresh processes per arm.
        #[arg(long, value_name = "S", default_value_t = 5, value_parser = positive)]
        samples: usize,
    },
    /// Which nodes each runtime claims (MODEL optional).
    #[command(after_help = AFTER_HELP)]
    Census {
        #[command(flatten)]
        common: Common,
    },
    /// Whole-model decode / generation / prefill of an LLM per token: generated (--gen llm:...)
    /// or MODEL, an onnxruntime-genai model folder (what its model builder writes).
    #[command(after_help = AFTER_HELP)]
    Llm {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        arms: ArmFlags,
        /// What to run.
        #[arg(
            long = "mode",
            value_name = "MODES",
            value_delimiter = ',',
            value_parser = ["decode", "generate", "prefill"],
            default_value = "decode,generate,prefill"
        )]
        modes: Vec<String>,
        /// Past (KV cache) length of a decode step.
        #[arg(long, value_name = "P", default_value_t = 64)]
        past: usize,
        /// Generated tokens per generate run.
        #[arg(long, value_name = "T", default_value_t = 32, value_parser = positive)]
        tokens: usize,
        /// How a step hands over the KV cache: `copy` (past in, presents out as new tensors) or
        /// `shared` (one buffer of the model's ctx positions per cache, the past input and the
        /// present output at once: onnxruntime-genai with `past_present_share_buffer: true`).
        #[arg(long, value_name = "KV", value_parser = ["copy", "shared"], default_value = "copy")]
        kv: String,
        /// Prefill (prompt) lengths.
        #[arg(
            long = "prompt",
            value_name = "P1,P2,..",
            value_delimiter = ',',
            value_parser = positive,
            default_value = "64,512"
        )]
        prompts: Vec<usize>,
        #[command(flatten)]
        shape: LlmShape,
        /// ORT profiler runs (per-op time) after the timed rounds.
        #[arg(long, value_name = "I", default_value_t = 3)]
        profile_iters: usize,
    },
    /// Write a generated model: `gen SPEC --out FILE.onnx`.
    #[command(after_help = AFTER_HELP)]
    Gen {
        /// The model to generate.
        #[arg(value_name = "SPEC")]
        spec: String,
        /// Output file (llm specs also write genai_config.json beside it).
        #[arg(long, value_name = "FILE.onnx")]
        out: String,
    },
    /// Greedy generation on ORT vs rcpu vs a null arm, with a latency plot
    /// [default: --gen llm:preset=qwen2-0.5b,acc=4].
    #[command(after_help = AFTER_HELP)]
    Demo {
        #[command(flatten)]
        common: Common,
        /// Timed rounds.
        #[arg(long, value_name = "R", default_value_t = 5, value_parser = positive)]
        rounds: usize,
        #[command(flatten)]
        null: NullFlags,
        /// Prompt length.
        #[arg(long = "prompt", value_name = "P", default_value = "64", value_delimiter = ',', value_parser = positive)]
        prompts: Vec<usize>,
        /// Generated tokens per run.
        #[arg(long, value_name = "T", default_value_t = 24, value_parser = positive)]
        tokens: usize,
        #[command(flatten)]
        shape: LlmShape,
        /// Latency plot [default: target/demo/latency.svg].
        #[arg(long, value_name = "FILE")]
        svg: Option<String>,
    },
    /// Serve the host probes `llm` reads beside every round (read bandwidth of a same-size
    /// buffer, compute probe, the CPUs' round trip) to a harness outside the bench: one JSON line
    /// per line read from stdin (e2e/python/og_bench.py).
    Probe {
        /// Bytes of the buffer read (those a token reads).
        #[arg(long, value_name = "N", value_parser = positive)]
        bytes: usize,
        /// Threads that read it.
        #[arg(long, value_name = "T", default_value_t = 2, value_parser = positive)]
        threads: usize,
        /// CPUs to run on (the round trip is between the first two) [default: the affinity mask].
        #[arg(long, value_name = "LIST", value_parser = cpu_list)]
        cpus: Option<CpuList>,
    },
    /// One arm's process (spawned by the bench itself).
    #[command(name = "__worker", hide = true)]
    Worker {
        #[arg(long, default_value = "")]
        arm: String,
        #[arg(long, default_value_t = 1, value_parser = positive)]
        threads: usize,
        #[arg(long, value_parser = cpu_list)]
        cpus: Option<CpuList>,
        #[arg(long, default_value = "")]
        model: String,
        #[arg(long, default_value_t = 1, value_parser = positive)]
        m: usize,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// ORT intra-op threads (0: ORT's default) [default: the arm's].
        #[arg(long)]
        ort_intra: Option<usize>,
        /// session.intra_op.allow_spinning (0 or 1) [default: ORT's].
        #[arg(long, value_parser = ["0", "1"])]
        ort_spin: Option<String>,
        /// An rcpu provider option of this arm's session (repeatable).
        #[arg(long = "rcpu-opt", value_name = "KEY=VALUE", value_parser = env_pair)]
        rcpu_opt: Vec<(String, String)>,
    },
}

/// Every option of every subcommand, with the defaults the subcommands start from.
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
    /// `--rcpu-ort`: ORT's own session options of the rcpu arm (and of its null twin).
    pub rcpu_ort: super::ort_opts::OrtOpts,
    /// `--null-ort`: ORT's own session options of the null arm (a with/without A/B).
    pub null_ort: Option<super::ort_opts::OrtOpts>,
    /// `--null-env KEY=VALUE`: environment variables of the null arm's process (a diagnostic
    /// switch such as `RCPU_PAR=ort` on one arm only).
    pub null_env: Vec<(String, String)>,
    /// `--null-opt`: rcpu provider options of the null arm's session.
    pub null_opts: Vec<(String, String)>,
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
    /// llm: `--kv shared` (genai's shared past/present buffers).
    pub kv_shared: bool,
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
            rcpu_ort: Default::default(),
            null_ort: None,
            null_env: vec![],
            null_opts: vec![],
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
            kv_shared: false,
            prompts: vec![64, 512],
            layers: None,
            vocab: None,
            profile_iters: 3,
        }
    }
}

/// Flags every measuring subcommand takes, and its optional MODEL.
#[derive(Debug, Args)]
struct Common {
    /// The model (.onnx); or --gen SPEC.
    #[arg(value_name = "MODEL")]
    model: Option<String>,
    /// Generate the model from SPEC (see below) instead of reading MODEL.
    #[arg(long, value_name = "SPEC")]
    gen: Option<String>,
    /// Lanes per arm [default: what the plugin would pick].
    #[arg(long, value_name = "N", value_parser = positive)]
    threads: Option<usize>,
    /// CPUs the arms may use, e.g. 0-3,8 [default: the affinity mask].
    #[arg(long, value_name = "LIST", value_parser = cpu_list)]
    cpus: Option<CpuList>,
    /// Write the report as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<String>,
    /// Rows of the activation (M) for generated matmul models.
    #[arg(long, value_name = "M", value_parser = positive)]
    m: Option<usize>,
    /// Seed of the generated weights and feeds.
    #[arg(long, value_name = "S", default_value_t = 42)]
    seed: u64,
}

/// The null arm and the steady-state rule (compare, llm, demo).
#[derive(Debug, Args)]
struct NullFlags {
    /// What the null arm runs (a second copy of one runtime: the A/A band).
    #[arg(long = "null", value_name = "ARM", default_value = "rcpu", value_parser = ["rcpu", "ort"])]
    null_arm: String,
    /// Parity tolerance [default: per op, docs/benchmarking.md].
    #[arg(long, value_name = "X")]
    tol: Option<f64>,
    /// Rounds the steady-state window spans.
    #[arg(long, value_name = "K", default_value_t = 3, value_parser = positive)]
    steady_k: usize,
    /// Relative spread the steady-state window may have.
    #[arg(long, value_name = "X", default_value_t = 0.05)]
    steady_tol: f64,
}

/// The timed rounds of compare and llm.
#[derive(Debug, Args)]
struct ArmFlags {
    /// Interleaved rounds [default: 12; llm: 6].
    #[arg(long, value_name = "R", value_parser = positive)]
    rounds: Option<usize>,
    /// Timed calls per arm and round [default: 20; llm: 10].
    #[arg(long, value_name = "I", value_parser = positive)]
    iters: Option<usize>,
    /// Untimed calls per arm before the rounds.
    #[arg(long, value_name = "W", default_value_t = 5)]
    warmup: usize,
    #[command(flatten)]
    null: NullFlags,
    /// The null arm is rcpu loading this plugin build (old vs new A/B; see below).
    #[arg(long, value_name = "SO")]
    null_plugin: Option<String>,
    /// ORT's own session options of the rcpu arm: intra-op threads (0: ORT's default) and
    /// session.intra_op.allow_spinning [default: intra=1, ORT's pool has no threads].
    #[arg(long, value_name = "intra=N,spin=0|1", value_parser = super::ort_opts::OrtOpts::parse)]
    rcpu_ort: Option<super::ort_opts::OrtOpts>,
    /// ORT's own session options of the null arm (see below) [default: its twin's].
    #[arg(
        long,
        value_name = "intra=N,spin=0|1",
        value_parser = super::ort_opts::OrtOpts::parse,
        conflicts_with = "null_plugin"
    )]
    null_ort: Option<super::ort_opts::OrtOpts>,
    /// An environment variable of the null arm's process only (repeatable), e.g. RCPU_PAR=ort.
    #[arg(long, value_name = "KEY=VALUE", value_parser = env_pair)]
    null_env: Vec<(String, String)>,
    /// An rcpu provider option of the null arm's session only (repeatable), e.g.
    /// acc4_scales=f32: null_b_over_a is then with / without it.
    #[arg(long, value_name = "KEY=VALUE", value_parser = env_pair)]
    null_opt: Vec<(String, String)>,
}

/// Overrides of a generated LLM's shape (llm, demo).
#[derive(Debug, Args)]
struct LlmShape {
    /// Decoder layers [default: the preset's].
    #[arg(long, value_name = "N", value_parser = positive)]
    layers: Option<usize>,
    /// Vocabulary size [default: the preset's].
    #[arg(long, value_name = "V", value_parser = positive)]
    vocab: Option<usize>,
}

/// A parsed `--cpus` list (a newtype: clap would read a bare `Vec` as repeated values).
#[derive(Debug, Clone)]
struct CpuList(Vec<usize>);

#[derive(Debug)]
pub enum Cmd {
    Compare(Opts),
    Gap(Opts),
    Cold(Opts),
    Census(Opts),
    Gen(Opts),
    Llm(Opts),
    Demo(Opts),
    Probe(super::probe::ProbeArgs),
    Worker(WorkerArgs),
    /// `--help`, `SUB --help`, `help [SUB]` or no arguments: the text to print (exit 0).
    Help(String),
}

fn positive(v: &str) -> Result<usize, String> {
    match v.parse::<usize>() {
        Ok(0) => Err("must be positive, got 0".into()),
        Ok(n) => Ok(n),
        Err(_) => Err(format!("'{v}' is not a positive integer")),
    }
}

/// `--null-env`: `KEY=VALUE` with a non-empty key.
fn env_pair(v: &str) -> Result<(String, String), String> {
    match v.split_once('=') {
        Some((k, val)) if !k.is_empty() => Ok((k.to_string(), val.to_string())),
        _ => Err(format!("'{v}' is not KEY=VALUE")),
    }
}

/// `--cpus`: a kernel CPU list (the library's parser), never empty.
fn cpu_list(v: &str) -> Result<CpuList, String> {
    let cpus = rcpu::runtime::topology::parse_cpu_list(v)?;
    if cpus.is_empty() {
        return Err("empty CPU list".into());
    }
    Ok(CpuList(cpus))
}

/// Parses `argv` (without the program name). `Err` is a bad command line (exit code 2).
pub fn parse(argv: &[String]) -> Result<Cmd, String> {
    let args = std::iter::once("rcpu-bench".to_string()).chain(argv.iter().cloned());
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind::{DisplayHelp, DisplayVersion};
            return match e.kind() {
                DisplayHelp | DisplayVersion => Ok(Cmd::Help(e.render().to_string())),
                // clap's own "error: " prefix goes: `main` prefixes "rcpu-bench: ".
                _ => {
                    let text = e.render().to_string();
                    Err(text.trim_start_matches("error: ").trim_end().to_string())
                }
            };
        }
    };
    let Some(sub) = cli.sub else {
        use clap::CommandFactory;
        return Ok(Cmd::Help(Cli::command().render_help().to_string()));
    };
    let mut o = Opts::default();
    let cmd = match sub {
        Sub::Compare { common, arms } => {
            apply_common(&mut o, common, "compare", true)?;
            apply_arms(&mut o, arms, (12, 20));
            Cmd::Compare(o)
        }
        Sub::Gap {
            common,
            gap_us,
            busy,
            tokens,
            sweep,
            svg,
        } => {
            apply_common(&mut o, common, "gap", true)?;
            if gap_us.is_none() && sweep.is_empty() {
                return Err("gap: needs --gap-us G or --sweep G1,G2,...".into());
            }
            (o.gap_us, o.busy, o.tokens, o.sweep, o.svg) = (gap_us, busy, tokens, sweep, svg);
            Cmd::Gap(o)
        }
        Sub::Cold { common, samples } => {
            apply_common(&mut o, common, "cold", true)?;
            o.samples = samples;
            Cmd::Cold(o)
        }
        Sub::Census { common } => {
            apply_common(&mut o, common, "census", false)?;
            Cmd::Census(o)
        }
        Sub::Llm {
            common,
            arms,
            modes,
            past,
            tokens,
            kv,
            prompts,
            shape,
            profile_iters,
        } => {
            apply_common(&mut o, common, "llm", true)?;
            let folder = o.model.as_deref().is_some_and(super::llm_folder::is_folder);
            if !folder && !o.gen.as_deref().is_some_and(|g| g.starts_with("llm:")) {
                return Err(
                    "llm: needs --gen llm:preset=... or MODEL, a genai model folder \
                     (genai_config.json beside the model)"
                        .into(),
                );
            }
            if folder && (shape.layers.is_some() || shape.vocab.is_some()) {
                return Err(
                    "llm: --layers and --vocab change a generated model, not a folder".into(),
                );
            }
            apply_arms(&mut o, arms, (6, 10));
            (o.modes, o.past, o.tokens, o.prompts) = (modes, past, tokens, prompts);
            (o.layers, o.vocab, o.profile_iters) = (shape.layers, shape.vocab, profile_iters);
            o.kv_shared = kv == "shared";
            Cmd::Llm(o)
        }
        Sub::Gen { spec, out } => {
            (o.gen, o.out) = (Some(spec), Some(out));
            Cmd::Gen(o)
        }
        Sub::Demo {
            common,
            rounds,
            null,
            prompts,
            tokens,
            shape,
            svg,
        } => {
            apply_common(&mut o, common, "demo", false)?;
            if prompts.len() != 1 {
                return Err("demo: --prompt takes one length".into());
            }
            apply_null(&mut o, null);
            (o.rounds, o.prompts, o.tokens, o.svg) = (rounds, prompts, tokens, svg);
            (o.layers, o.vocab) = (shape.layers, shape.vocab);
            Cmd::Demo(o)
        }
        Sub::Probe {
            bytes,
            threads,
            cpus,
        } => Cmd::Probe(super::probe::ProbeArgs {
            bytes,
            threads,
            cpus: cpus.map(|c| c.0).unwrap_or_default(),
        }),
        Sub::Worker {
            arm,
            threads,
            cpus,
            model,
            m,
            seed,
            ort_intra,
            ort_spin,
            rcpu_opt,
        } => Cmd::Worker(WorkerArgs {
            arm,
            threads,
            cpus: cpus.map(|c| c.0).unwrap_or_default(),
            model,
            m,
            seed,
            ort: super::ort_opts::OrtOpts {
                intra: ort_intra,
                spin: ort_spin.map(|s| s == "1"),
            },
            rcpu_opts: rcpu_opt,
        }),
    };
    Ok(cmd)
}

/// The common flags into `o`; `needs_model`: MODEL or --gen is required (never both).
fn apply_common(o: &mut Opts, c: Common, sub: &str, needs_model: bool) -> Result<(), String> {
    if c.model.is_some() && c.gen.is_some() {
        return Err(format!("{sub}: give MODEL or --gen SPEC, not both"));
    }
    if needs_model && c.model.is_none() && c.gen.is_none() {
        return Err(format!("{sub}: needs MODEL or --gen SPEC"));
    }
    (o.model, o.gen, o.threads, o.json, o.m, o.seed) =
        (c.model, c.gen, c.threads, c.json, c.m, c.seed);
    o.cpus = c.cpus.map(|l| l.0);
    Ok(())
}

fn apply_null(o: &mut Opts, n: NullFlags) {
    (o.null_arm, o.tol, o.steady_k, o.steady_tol) = (n.null_arm, n.tol, n.steady_k, n.steady_tol);
}

/// The round flags into `o`; `(rounds, iters)`: this subcommand's defaults.
fn apply_arms(o: &mut Opts, a: ArmFlags, (rounds, iters): (usize, usize)) {
    o.rounds = a.rounds.unwrap_or(rounds);
    o.iters = a.iters.unwrap_or(iters);
    o.warmup = a.warmup;
    o.null_plugin = a.null_plugin;
    o.rcpu_ort = a.rcpu_ort.unwrap_or_default();
    o.null_ort = a.null_ort;
    o.null_env = a.null_env;
    o.null_opts = a.null_opt;
    apply_null(o, a.null);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Cmd, String> {
        parse(&s.split_whitespace().map(String::from).collect::<Vec<_>>())
    }

    #[test]
    fn ort_session_options_reach_the_arms() {
        use super::super::ort_opts::OrtOpts;
        let Cmd::Compare(o) =
            p("compare --gen mixed:k=64,n=64 --rcpu-ort intra=0 --null-ort intra=0,spin=0")
                .unwrap()
        else {
            panic!("not compare")
        };
        assert_eq!(
            (o.rcpu_ort, o.null_ort),
            (
                OrtOpts {
                    intra: Some(0),
                    spin: None
                },
                Some(OrtOpts {
                    intra: Some(0),
                    spin: Some(false)
                })
            )
        );
        let Cmd::Compare(o) = p("compare --gen nbits:k=64,n=64").unwrap() else {
            panic!("not compare")
        };
        assert_eq!((o.rcpu_ort, o.null_ort), (OrtOpts::default(), None));
        let Cmd::Compare(o) = p("compare m.onnx --null-env RCPU_PAR=ort --null-env A=").unwrap()
        else {
            panic!("not compare")
        };
        assert_eq!(
            o.null_env,
            [
                ("RCPU_PAR".into(), "ort".into()),
                ("A".into(), String::new())
            ]
        );
        let Cmd::Worker(w) = p("__worker --arm rcpu --ort-intra 0 --ort-spin 0").unwrap() else {
            panic!("not worker")
        };
        assert_eq!(
            w.ort,
            OrtOpts {
                intra: Some(0),
                spin: Some(false)
            }
        );
        let Cmd::Llm(o) =
            p("llm --gen llm:preset=qwen2-0.5b --null-opt acc4_scales=f32 --null-opt fuse=off")
                .unwrap()
        else {
            panic!("not llm")
        };
        assert_eq!(
            o.null_opts,
            [
                ("acc4_scales".into(), "f32".into()),
                ("fuse".into(), "off".into())
            ]
        );
        let Cmd::Worker(w) = p("__worker --arm rcpu --rcpu-opt acc4_scales=f32").unwrap() else {
            panic!("not worker")
        };
        assert_eq!(w.rcpu_opts, [("acc4_scales".into(), "f32".into())]);
        let spec = super::super::worker::session_spec(&w);
        let crate::Provider::Rcpu(opts) = spec.provider else {
            panic!("not an rcpu session")
        };
        assert!(
            opts.contains(&("acc4_scales".into(), "f32".into())),
            "{opts:?}"
        );
        assert!(opts.contains(&("threads".into(), "1".into())), "{opts:?}");
        for bad in [
            "llm --gen llm:preset=qwen2-0.5b --null-opt acc4_scales",
            "compare m.onnx --rcpu-ort spin=2",
            "compare m.onnx --null-ort threads=1",
            "compare m.onnx --null-ort spin=0 --null-plugin x.so",
            "compare m.onnx --null-env =1",
            "compare m.onnx --null-env RCPU_PAR",
            "gap m.onnx --gap-us 5 --rcpu-ort intra=0",
        ] {
            assert!(p(bad).is_err(), "{bad} must be rejected");
        }
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
        assert!(matches!(p("demo --help").unwrap(), Cmd::Help(_)));
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
        assert!(!o.kv_shared, "the KV cache is copied unless asked");
        let Cmd::Llm(o) = p("llm --gen llm:preset=qwen2-0.5b --kv shared").unwrap() else {
            panic!("not llm")
        };
        assert!(o.kv_shared);
        assert!(p("llm --gen llm:preset=qwen2-0.5b --kv both").is_err());
    }

    #[test]
    fn rejects_bad_flags_with_clear_messages() {
        let cases = [
            (
                "compare m.onnx --thread 2",
                "unexpected argument '--thread'",
            ),
            (
                "compare m.onnx --threads",
                "a value is required for '--threads",
            ),
            (
                "compare m.onnx --threads abc",
                "'--threads <N>': 'abc' is not a positive integer",
            ),
            ("compare m.onnx --threads 0", "must be positive, got 0"),
            (
                "compare m.onnx --gap-us 5",
                "unexpected argument '--gap-us'",
            ),
            ("compare", "needs MODEL or --gen SPEC"),
            ("compare a.onnx --gen nbits:k=1,n=1", "not both"),
            ("gap m.onnx", "needs --gap-us"),
            ("compare m.onnx --cpus 3-1", "descending CPU range"),
            ("compare m.onnx --null xyz", "possible values: rcpu, ort"),
            ("frobnicate", "unrecognized subcommand 'frobnicate'"),
            ("gen nbits:k=1,n=1", "--out <FILE.onnx>"),
            ("llm --gen nbits:k=1,n=1", "needs --gen llm:"),
            (
                "llm --gen llm:preset=qwen2-0.5b --mode fly",
                "invalid value 'fly' for '--mode",
            ),
            ("llm --gen llm: --prompt 64,0", "must be positive"),
            ("demo --prompt 8,16", "one length"),
            ("compare m.onnx --cpus=", "empty CPU list"),
            (
                "gen nbits:k=1,n=1 --out x.onnx --threads 2",
                "unexpected argument '--threads'",
            ),
            ("demo --iters 3", "unexpected argument '--iters'"),
        ];
        for (line, want) in cases {
            match p(line) {
                Ok(c) => panic!("`{line}` was accepted: {c:?}"),
                Err(e) => assert!(e.contains(want), "`{line}`: error '{e}' lacks '{want}'"),
            }
        }
    }

    #[test]
    fn help_is_generated_and_bad_arguments_exit_2() {
        let Cmd::Help(top) = p("").unwrap() else {
            panic!("no arguments is not help")
        };
        for want in [
            "compare",
            "census",
            "llm",
            "demo",
            "SPEC: nbits:",
            "Exit codes: 0 ok",
        ] {
            assert!(top.contains(want), "top-level help lacks '{want}':\n{top}");
        }
        assert!(!top.contains("__worker"), "the worker subcommand is hidden");
        for line in ["--help", "help", "help llm"] {
            assert!(
                matches!(p(line).unwrap(), Cmd::Help(_)),
                "`{line}` is not help"
            );
        }
        let Cmd::Help(llm) = p("llm --help").unwrap() else {
            panic!("llm --help is not help")
        };
        for want in ["--null-plugin <SO>", "--profile-iters", "Exit codes"] {
            assert!(llm.contains(want), "llm help lacks '{want}':\n{llm}");
        }
        let run = |line: &str| {
            super::super::main(
                &line
                    .split_whitespace()
                    .map(String::from)
                    .collect::<Vec<_>>(),
            )
        };
        assert_eq!(run("compare m.onnx --threads 0"), 2);
        assert_eq!(run("frobnicate"), 2);
        assert_eq!(
            run("compare --gen llm:preset=qwen2-0.5b"),
            2,
            "llm specs need `llm`"
        );
        assert_eq!(run("--help"), 0);
    }

    #[test]
    fn worker_arguments_round_trip() {
        let Cmd::Worker(w) =
            p("__worker --arm rcpu --threads 2 --cpus 0,1 --model m.onnx --m 3 --seed 7").unwrap()
        else {
            panic!("not a worker")
        };
        assert_eq!(
            (
                w.arm.as_str(),
                w.threads,
                w.cpus,
                w.model.as_str(),
                w.m,
                w.seed
            ),
            ("rcpu", 2, vec![0, 1], "m.onnx", 3, 7)
        );
        assert!(p("__worker --arm rcpu --bogus 1").is_err());
    }

    #[test]
    fn probe_arguments() {
        let Cmd::Probe(pr) = p("probe --bytes 278000000 --threads 2 --cpus 0-1").unwrap() else {
            panic!("not a probe")
        };
        assert_eq!(
            (pr.bytes, pr.threads, pr.cpus),
            (278_000_000, 2, vec![0, 1])
        );
        let Cmd::Probe(pr) = p("probe --bytes 4096").unwrap() else {
            panic!("not a probe")
        };
        assert_eq!(
            (pr.threads, pr.cpus),
            (2, vec![]),
            "defaults: 2 threads, the affinity mask"
        );
        assert!(p("probe").is_err(), "--bytes is required");
        assert!(p("probe --bytes 0").is_err());
        assert!(p("probe --bytes 64 --cpus x").is_err());
    }
}
