//! ORT's own session options for an arm (`--rcpu-ort`, `--null-ort`): how many intra-op threads
//! ORT's pool has and whether they spin. They matter for the rcpu arm when a model leaves heavy
//! nodes to ORT's CPU EP (a `mixed:` spec): ORT's pool then runs next to rcpu's lanes.

use crate::SessionSpec;

/// The session config key that turns the spinning of ORT's intra-op threads on or off.
pub const ALLOW_SPINNING: &str = "session.intra_op.allow_spinning";

/// ORT session options of one arm; `None` fields keep the arm's defaults (the ORT arm: as many
/// intra-op threads as lanes; the rcpu arm: one, so ORT's pool has no threads of its own).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OrtOpts {
    /// ORT intra-op threads; `Some(0)` = ORT's own default (one per physical core).
    pub intra: Option<usize>,
    /// `session.intra_op.allow_spinning`.
    pub spin: Option<bool>,
}

impl OrtOpts {
    /// Parses `intra=N,spin=0|1` (either item may be left out; `intra=0` is ORT's default).
    pub fn parse(s: &str) -> Result<OrtOpts, String> {
        let mut o = OrtOpts::default();
        for item in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
            let (key, val) = item
                .split_once('=')
                .ok_or_else(|| format!("bad ORT option '{item}': expected intra=N or spin=0|1"))?;
            match key {
                "intra" => {
                    o.intra = Some(val.parse().map_err(|_| {
                        format!("ORT option intra='{val}' is not a non-negative integer")
                    })?)
                }
                "spin" => {
                    o.spin = Some(match val {
                        "0" => false,
                        "1" => true,
                        _ => return Err(format!("ORT option spin='{val}' must be 0 or 1")),
                    })
                }
                _ => return Err(format!("unknown ORT option '{key}' (intra, spin)")),
            }
        }
        Ok(o)
    }

    /// The worker's command-line flags carrying these options.
    pub fn worker_args(&self) -> Vec<String> {
        let mut a = Vec::new();
        if let Some(n) = self.intra {
            a.extend(["--ort-intra".to_string(), n.to_string()]);
        }
        if let Some(s) = self.spin {
            a.extend(["--ort-spin".to_string(), u8::from(s).to_string()]);
        }
        a
    }

    /// Applies the options to an arm's session.
    pub fn apply(&self, spec: &mut SessionSpec) {
        match self.intra {
            Some(0) => spec.intra_op_threads = None,
            Some(n) => spec.intra_op_threads = Some(n),
            None => {}
        }
        if let Some(s) = self.spin {
            let v = if s { "1" } else { "0" };
            spec.config
                .push((ALLOW_SPINNING.to_string(), v.to_string()));
        }
    }

    /// `intra=default spin=1`-style text for headers ("" when nothing is set).
    pub fn label(&self) -> String {
        let mut parts = Vec::new();
        match self.intra {
            Some(0) => parts.push("intra=default".to_string()),
            Some(n) => parts.push(format!("intra={n}")),
            None => {}
        }
        if let Some(s) = self.spin {
            parts.push(format!("spin={}", u8::from(s)));
        }
        parts.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_applies_and_round_trips() {
        let o = OrtOpts::parse("intra=0,spin=0").unwrap();
        assert_eq!(
            o,
            OrtOpts {
                intra: Some(0),
                spin: Some(false)
            }
        );
        let mut spec = SessionSpec::rcpu(&[]);
        o.apply(&mut spec);
        assert_eq!(spec.intra_op_threads, None, "intra=0 is ORT's default");
        assert_eq!(
            spec.config,
            vec![(ALLOW_SPINNING.to_string(), "0".to_string())]
        );
        assert_eq!(o.worker_args(), ["--ort-intra", "0", "--ort-spin", "0"]);
        assert_eq!(o.label(), "intra=default spin=0");

        let o = OrtOpts::parse("intra=3").unwrap();
        let mut spec = SessionSpec::rcpu(&[]);
        o.apply(&mut spec);
        assert_eq!((spec.intra_op_threads, spec.config.len()), (Some(3), 0));
        assert_eq!(OrtOpts::parse("").unwrap(), OrtOpts::default());
        for bad in ["intra=x", "spin=2", "threads=2", "spin"] {
            assert!(OrtOpts::parse(bad).is_err(), "{bad} must be rejected");
        }
    }
}
