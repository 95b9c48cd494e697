//! `include/rcpu_ep.h` compiles with a real C compiler, and agrees with the Rust constants.

use std::path::PathBuf;

#[test]
fn header_compiles_as_c_and_cpp() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let out = std::env::temp_dir().join(format!("rcpu-header-{}", std::process::id()));
    std::fs::create_dir_all(&out).unwrap();
    let src = out.join("use_header.c");
    std::fs::write(
        &src,
        "#include \"rcpu_ep.h\"\n#include <string.h>\n\
         int check(void) {\n\
           size_t (*stats)(char*, size_t) = RcpuEp_StatsJson; void (*reset)(void) = RcpuEp_ResetStats;\n\
           const char* (*ver)(void) = RcpuEp_Version; (void)stats; (void)reset; (void)ver;\n\
           return (int)strlen(RCPU_EP_NAME RCPU_OPT_THREADS RCPU_OPT_AFFINITY RCPU_OPT_BLOCKTIME_US\n\
                              RCPU_OPT_WEIGHT_CACHE_MB RCPU_OPT_SCRATCH_CACHE_MB\n\
                              RCPU_OPT_ACCUMULATOR_CACHE_MB);\n}\n",
    )
    .unwrap();
    for (cpp, std) in [(false, "-std=c99"), (true, "-std=c++17")] {
        let compiler = cc::Build::new()
            .cpp(cpp)
            .target("x86_64-unknown-linux-gnu")
            .host("x86_64-unknown-linux-gnu")
            .opt_level(0)
            .cargo_metadata(false)
            .get_compiler();
        let mut cmd = compiler.to_command();
        if cpp {
            cmd.arg("-x").arg("c++");
        }
        let status = cmd
            .arg(std)
            .arg("-Wall")
            .arg("-Werror")
            .arg("-pedantic")
            .arg("-I")
            .arg(root.join("include"))
            .arg("-c")
            .arg(&src)
            .arg("-o")
            .arg(out.join(if cpp { "a_cpp.o" } else { "a_c.o" }))
            .status()
            .expect("run the C compiler");
        assert!(status.success(), "rcpu_ep.h failed to compile ({std})");
    }
}

#[test]
fn header_names_match_the_code() {
    assert_eq!(rcpu::ep::config::HEADER_EP_NAME, rcpu::ep::EP_NAME);
    // Every key the header declares is accepted by the parser (and nothing else is).
    for key in rcpu::ep::config::OPTION_KEYS {
        let full = format!("{}{key}", rcpu::ep::config::CONFIG_PREFIX);
        let value = match key {
            "affinity" | "fuse" | "step_times" => "off",
            "acc4_scales" => "f32",
            _ => "1",
        };
        rcpu::ep::Config::from_entries([(full.as_str(), value)])
            .unwrap_or_else(|e| panic!("{key}: {e}"));
    }
}
