//! Provider options -> Config: defaults, every key, and clear errors naming the key.

use rcpu::ep::config::{Acc4Scales, Config, CONFIG_PREFIX, DEFAULT_BLOCKTIME_US};
use rcpu::runtime::Affinity;

fn parse(pairs: &[(&str, &str)]) -> Result<Config, String> {
    let full: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (format!("{CONFIG_PREFIX}{k}"), v.to_string()))
        .collect();
    Config::from_entries(full.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

#[test]
fn defaults() {
    let c = parse(&[]).unwrap();
    assert!(c.threads >= 1);
    assert_eq!(c.affinity, Affinity::Physical);
    assert_eq!(c.blocktime_us, DEFAULT_BLOCKTIME_US);
    assert_eq!(c.weight_cache_mb, None);
    assert_eq!(c.scratch_cache_mb, None);
    assert!(c.fuse, "fuse defaults to on");
    assert_eq!(
        c.acc4_scales,
        Acc4Scales::F16,
        "acc4_scales defaults to f16"
    );
}

/// `acc4_scales` takes exactly `f16` or `f32`; anything else is refused naming the key and the
/// values.
#[test]
fn acc4_scales_is_f16_or_f32() {
    assert_eq!(
        parse(&[("acc4_scales", "f16")]).unwrap().acc4_scales,
        Acc4Scales::F16
    );
    assert_eq!(
        parse(&[("acc4_scales", "f32")]).unwrap().acc4_scales,
        Acc4Scales::F32
    );
    assert_eq!(
        parse(&[("acc4_scales", " f32 ")]).unwrap().acc4_scales,
        Acc4Scales::F32,
        "surrounding blanks are trimmed, as for every option"
    );
    for bad in ["", "F32", "fp32", "f64", "bf16", "32", "on"] {
        let err = parse(&[("acc4_scales", bad)]).expect_err(bad);
        assert!(
            err.contains("'acc4_scales'") && err.contains("'f16' or 'f32'"),
            "{bad:?}: {err}"
        );
    }
}

/// `fuse` and `step_times` take exactly `on` or `off` (defaults on and off); anything else is
/// refused naming the key and the values.
#[test]
fn switches_are_on_or_off() {
    assert!(parse(&[]).unwrap().fuse);
    assert!(parse(&[("fuse", "on")]).unwrap().fuse);
    assert!(!parse(&[("fuse", "off")]).unwrap().fuse);
    assert!(!parse(&[]).unwrap().step_times);
    assert!(parse(&[("step_times", "on")]).unwrap().step_times);
    assert!(!parse(&[("step_times", "off")]).unwrap().step_times);
    for key in ["fuse", "step_times"] {
        for bad in ["", "1", "true", "ON", "maybe"] {
            let err = parse(&[(key, bad)]).expect_err(bad);
            assert!(
                err.contains(&format!("'{key}'")) && err.contains("'on' or 'off'"),
                "{key} {bad:?}: {err}"
            );
        }
    }
}

#[test]
fn every_key_parses() {
    let c = parse(&[
        ("threads", "3"),
        ("affinity", "off"),
        ("blocktime_us", "0"),
        ("weight_cache_mb", "512"),
        ("scratch_cache_mb", "8"),
    ])
    .unwrap();
    assert_eq!(c.threads, 3);
    assert_eq!(c.affinity, Affinity::Off);
    assert_eq!(c.blocktime_us, 0);
    assert_eq!(c.weight_cache_mb, Some(512));
    assert_eq!(c.scratch_cache_mb, Some(8));
}

/// `accumulator_cache_mb`, the former name of `scratch_cache_mb`, still sets the scratch budget;
/// both at once is refused with a message naming both.
#[test]
fn accumulator_cache_mb_is_an_alias_of_scratch_cache_mb() {
    let c = parse(&[("accumulator_cache_mb", "7")]).unwrap();
    assert_eq!(c.scratch_cache_mb, Some(7));
    assert_eq!(c, parse(&[("scratch_cache_mb", "7")]).unwrap());
    for pairs in [
        [("scratch_cache_mb", "7"), ("accumulator_cache_mb", "7")],
        [("accumulator_cache_mb", "1"), ("scratch_cache_mb", "2")],
    ] {
        let err = parse(&pairs).expect_err("both names at once");
        assert!(
            err.contains("'scratch_cache_mb'") && err.contains("'accumulator_cache_mb'"),
            "{err}"
        );
    }
}

#[test]
fn cpu_list_sets_default_threads() {
    let c = parse(&[("affinity", "0,1")]).unwrap();
    assert_eq!(c.threads, 2);
    assert!(matches!(c.affinity, Affinity::List(ref v) if v == &vec![0, 1]));
}

#[test]
fn entries_outside_the_prefix_are_ignored() {
    let c = Config::from_entries([
        ("session.intra_op.allow_spinning", "0"),
        ("ep.otherep.threads", "x"),
    ])
    .unwrap();
    assert_eq!(c, parse(&[]).unwrap());
}

#[test]
fn bad_input_names_the_key() {
    for (pairs, key) in [
        (vec![("bogus", "1")], "bogus"),
        (vec![("threads", "abc")], "threads"),
        (vec![("threads", "-1")], "threads"),
        (vec![("threads", "100000")], "threads"),
        (vec![("affinity", "banana")], "affinity"),
        (vec![("blocktime_us", "1.5")], "blocktime_us"),
        (vec![("weight_cache_mb", "")], "weight_cache_mb"),
        (vec![("scratch_cache_mb", "x")], "scratch_cache_mb"),
        (vec![("accumulator_cache_mb", "x")], "accumulator_cache_mb"),
        (vec![("threads", "4"), ("affinity", "0,1")], "affinity"),
    ] {
        let err = parse(&pairs).expect_err(&format!("{pairs:?} must be rejected"));
        assert!(
            err.contains(&format!("'{key}'")),
            "error for {pairs:?} does not name '{key}': {err}"
        );
    }
}

/// A value of digits only past u64 is out of range, not "not an integer" (the adversarial pass
/// found the misleading message; seen failing before the parse_u64 fix).
#[test]
fn digits_past_u64_are_out_of_range() {
    for key in ["threads", "blocktime_us", "weight_cache_mb"] {
        let err = parse(&[(key, "99999999999999999999")]).expect_err("must be rejected");
        assert!(err.contains("out of range"), "{key}: {err}");
    }
    let err = parse(&[("threads", "1e3")]).expect_err("must be rejected");
    assert!(err.contains("non-negative integer"), "{err}");
}

/// A CPU list far larger than the machine: parsed in linear time with every id bounded, and
/// lanes bounded by the CPUs the process may use (not one lane per listed id).
#[test]
fn huge_cpu_lists_are_bounded() {
    // Ten large ranges: once accepted (65536 ids each, with a quadratic duplicate check that
    // took about a minute); ids past what an affinity set can name are refused at once.
    let ranges: Vec<String> = (0..10)
        .map(|i| format!("{}-{}", i * 65536, i * 65536 + 65535))
        .collect();
    let err = parse(&[("affinity", &ranges.join(","))]).unwrap_err();
    assert!(
        err.contains("'affinity'") && err.contains("beyond"),
        "{err}"
    );
    let err = parse(&[("affinity", "0-4095")]).unwrap_err();
    assert!(err.contains("'affinity'"), "{err}");
    let err = parse(&[("affinity", "0-1023,5")]).unwrap_err();
    assert!(err.contains("listed twice"), "{err}");
    // The whole set: lanes are the CPUs this process may run on, never 1024 of them.
    let c = parse(&[("affinity", "0-1023")]).unwrap();
    let allowed = rcpu::os::allowed_cpus().unwrap();
    assert_eq!(c.threads, allowed.len().min(1024), "threads {}", c.threads);
    assert!(matches!(c.affinity, Affinity::List(ref v) if v.len() == 1024));
}

#[test]
fn lanes_for_a_list_count_allowed_cpus_within_the_cap() {
    use rcpu::runtime::affinity::lanes_for_list;
    let list: Vec<usize> = (0..1024).collect();
    assert_eq!(lanes_for_list(&list, Some(&[0, 1]), 1024), 2);
    assert_eq!(lanes_for_list(&list, Some(&[5, 2000]), 1024), 1);
    assert_eq!(lanes_for_list(&list, None, 1024), 1024);
    assert_eq!(lanes_for_list(&list, None, 16), 16);
    assert_eq!(lanes_for_list(&[7, 8], Some(&[0, 1]), 1024), 1); // none usable: still one lane
}
