//! `rcpu-bench`: the benchmark tool (docs/benchmarking.md). One file per responsibility:
//! args (command line), gen (decode-shaped models), model (what a model holds), target (model and
//! placement), os (the few unsafe OS calls), conditions (/proc, /sys), quant (quantiles), steady
//! (steady-state window), verdict (null band), membw (bandwidth floor), cpu_probe (the CPUs' speed
//! beside each round's read), lane_probe (how far apart the arms' CPUs sit, beside it too),
//! gen_llm / gen_moe / llm_model / llm_folder / llm (whole LLMs: generator, its mixture-of-experts
//! layer, cache and feeds, genai model folders such as the model builder writes, the llm
//! subcommand), model_bytes (what initializers
//! weigh and what a decode token reads of them),
//! gen_mixed (rcpu's nodes alternating with heavy nodes left to ORT), gen_glue (chains of small
//! glue nodes), ort_opts (ORT's own session options of an arm), demo (the generation demo),
//! profile (ORT's profiler), report (the compare report and JSON), counters (ledger and pool
//! report), arm/worker (one process per arm), rounds (one interleaved round of the arms, shared
//! by compare, llm and demo), svg (plots), probe (those host probes served to a harness outside
//! the bench), and one file per subcommand.

pub mod args;
pub mod arm;
pub mod census;
pub mod cold;
pub mod compare;
pub mod conditions;
pub mod counters;
pub mod cpu_probe;
pub mod demo;
pub mod gap;
pub mod gen;
pub mod gen_decoder;
pub mod gen_glue;
pub mod gen_llm;
pub mod gen_mixed;
pub mod gen_moe;
pub mod gen_qlinear;
pub mod lane_probe;
pub mod llm;
pub mod llm_folder;
pub mod llm_model;
pub mod llm_report;
pub mod membw;
pub mod model;
pub mod model_bytes;
pub mod ort_opts;
pub mod os;
pub mod probe;
pub mod profile;
pub mod quant;
pub mod report;
pub mod rounds;
pub mod steady;
pub mod svg;
pub mod target;
pub mod verdict;
pub mod worker;

use args::{Cmd, Opts};

/// Runs the command line; returns the process exit code.
pub fn main(argv: &[String]) -> i32 {
    let cmd = match args::parse(argv) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rcpu-bench: {e}");
            return 2;
        }
    };
    if let Cmd::Compare(o) | Cmd::Gap(o) | Cmd::Cold(o) | Cmd::Census(o) = &cmd {
        if o.gen.as_deref().is_some_and(|g| g.starts_with("llm:")) {
            eprintln!(
                "rcpu-bench: llm: models are benchmarked with `rcpu-bench llm --gen llm:...`"
            );
            return 2;
        }
    }
    let r = match cmd {
        Cmd::Help(text) => {
            print!("{text}");
            Ok(0)
        }
        Cmd::Worker(w) => worker::run(w).map(|_| 0),
        Cmd::Compare(o) => compare::run(&o),
        Cmd::Demo(o) => demo::run(&o),
        Cmd::Gap(o) => gap::run(&o),
        Cmd::Cold(o) => cold::run(&o),
        Cmd::Census(o) => census::run(&o),
        Cmd::Gen(o) => gen_file(&o),
        Cmd::Llm(o) => llm::run(&o),
        Cmd::Probe(p) => probe::run(&p),
    };
    r.unwrap_or_else(|e| {
        eprintln!("rcpu-bench: {e}");
        1
    })
}

fn gen_file(o: &Opts) -> Result<i32, String> {
    let spec = gen::Spec::parse(o.gen.as_deref().unwrap_or(""))?;
    let out = o.out.as_deref().unwrap_or("model.onnx");
    if let gen::Kind::Llm(l) = &spec.kind {
        // The model and its genai_config.json, side by side in the output's directory.
        let p = std::path::Path::new(out);
        let dir = p.parent().filter(|d| !d.as_os_str().is_empty());
        let dir = dir.unwrap_or(std::path::Path::new("."));
        let file = p
            .file_name()
            .and_then(|f| f.to_str())
            .unwrap_or("model.onnx");
        let m = llm_model::write(l, dir, file)?;
        let side = if l.needs_external_data() {
            format!(", its weights in {out}.data")
        } else {
            String::new()
        };
        println!(
            "wrote {out}{side} and {}: {} ({} bytes, {} weight bytes per token)",
            dir.join("genai_config.json").display(),
            m.label,
            m.file_bytes,
            m.weight_bytes
        );
        return Ok(0);
    }
    let g = spec.generate();
    std::fs::write(out, &g.bytes).map_err(|e| format!("{out}: {e}"))?;
    println!(
        "wrote {out}: {} ({} bytes, {} weight bytes per token)",
        spec.label(),
        g.bytes.len(),
        g.weight_bytes
    );
    Ok(0)
}
