//! Provider options -> Config: defaults, every key, and clear errors naming the key.

use rcpu::ep::config::{Config, CONFIG_PREFIX, DEFAULT_BLOCKTIME_US};
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
    assert_eq!(c.accumulator_cache_mb, None);
}

#[test]
fn every_key_parses() {
    let c = parse(&[
        ("threads", "3"),
        ("affinity", "off"),
        ("blocktime_us", "0"),
        ("weight_cache_mb", "512"),
        ("accumulator_cache_mb", "8"),
    ])
    .unwrap();
    assert_eq!(c.threads, 3);
    assert_eq!(c.affinity, Affinity::Off);
    assert_eq!(c.blocktime_us, 0);
    assert_eq!(c.weight_cache_mb, Some(512));
    assert_eq!(c.accumulator_cache_mb, Some(8));
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
