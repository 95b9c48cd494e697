//! rcpu-bench: see `rcpu_e2e::bench` and docs/benchmarking.md.

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(rcpu_e2e::bench::main(&argv));
}
