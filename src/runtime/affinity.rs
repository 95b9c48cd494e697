//! Where each lane runs: the `affinity` setting and the CPU plan derived from it.
//!
//! Lane 0 is the dispatching (calling) thread. It is never pinned by rcpu (it belongs to the
//! application), but the plan reserves a CPU for it: workers take the CPUs after the first, so
//! the caller has the first planned core to itself when the scheduler puts it there.

use super::topology::Topology;
use crate::os;
use std::fmt;
use std::str::FromStr;

/// How the worker lanes are pinned.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Affinity {
    /// One lane per physical core of the affinity mask (lowest SMT sibling first); when there
    /// are more lanes than cores, the extra lanes take the remaining SMT siblings, then run
    /// unpinned.
    Physical,
    /// No pinning at all.
    Off,
    /// Lane `i` is pinned to the `i`-th CPU of the list; lanes beyond the list run unpinned.
    List(Vec<usize>),
}

/// Why an affinity string was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AffinityParseError(pub String);

impl fmt::Display for AffinityParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AffinityParseError {}

const EXPECTED: &str = "expected `physical`, `off` or a CPU list like `0,2,4-6`";

fn bad(s: &str, why: &str) -> AffinityParseError {
    AffinityParseError(format!("invalid affinity {s:?}: {why} ({EXPECTED})"))
}

impl FromStr for Affinity {
    type Err = AffinityParseError;

    /// `physical`, `off`, or a CPU list such as `0,2,4-6` (order kept, duplicates rejected).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        match t.to_ascii_lowercase().as_str() {
            "physical" => return Ok(Affinity::Physical),
            "off" => return Ok(Affinity::Off),
            "" => return Err(bad(s, "empty")),
            _ => {}
        }
        // Linear in the input: every id is below `MAX_CPUS` (a range is checked before it is
        // expanded), and a CPU seen twice is refused at once, so the list holds at most
        // `MAX_CPUS` ids whatever the string.
        let mut cpus = Vec::new();
        let mut seen = vec![false; MAX_CPUS];
        for item in t.split(',') {
            let item = item.trim();
            let num = |v: &str| -> Result<usize, AffinityParseError> {
                let c: usize = v
                    .trim()
                    .parse()
                    .map_err(|_| bad(s, &format!("bad item {item:?}")))?;
                if c >= MAX_CPUS {
                    return Err(bad(
                        s,
                        &format!("CPU {c} is beyond the {MAX_CPUS} CPUs an affinity set can name"),
                    ));
                }
                Ok(c)
            };
            if item.is_empty() {
                return Err(bad(s, "empty item in CPU list"));
            }
            let (lo, hi) = match item.split_once('-') {
                Some((a, b)) => (num(a)?, num(b)?),
                None => {
                    let c = num(item)?;
                    (c, c)
                }
            };
            if lo > hi {
                return Err(bad(s, &format!("descending range {item:?}")));
            }
            for (c, seen) in seen.iter_mut().enumerate().take(hi + 1).skip(lo) {
                if std::mem::replace(seen, true) {
                    return Err(bad(s, &format!("CPU {c} listed twice")));
                }
                cpus.push(c);
            }
        }
        Ok(Affinity::List(cpus))
    }
}

impl fmt::Display for Affinity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Affinity::Physical => f.write_str("physical"),
            Affinity::Off => f.write_str("off"),
            Affinity::List(v) => {
                let parts: Vec<String> = v.iter().map(|c| c.to_string()).collect();
                f.write_str(&parts.join(","))
            }
        }
    }
}

/// Highest CPU id + 1 an affinity list may name (what `sched_setaffinity`'s set can hold).
pub const MAX_CPUS: usize = os::SET_BITS;

/// Lanes a CPU list gives when `threads` is not set: the listed CPUs the process may run on
/// (`allowed`, its affinity mask; all of them when the mask is unknown), at most `cap`, at
/// least 1.
pub fn lanes_for_list(list: &[usize], allowed: Option<&[usize]>, cap: usize) -> usize {
    let usable = match allowed {
        Some(allowed) => {
            let mut mask = vec![false; MAX_CPUS];
            for &c in allowed.iter().filter(|&&c| c < MAX_CPUS) {
                mask[c] = true;
            }
            list.iter().filter(|&&c| mask.get(c) == Some(&true)).count()
        }
        None => list.len(),
    };
    usable.clamp(1, cap.max(1))
}

impl Affinity {
    /// The CPU planned for each of `lanes` lanes (index = lane; lane 0 is the caller), `None`
    /// for a lane that runs unpinned.
    pub fn plan(&self, lanes: usize, topo: &Topology) -> Vec<Option<usize>> {
        let order: Vec<usize> = match self {
            Affinity::Off => Vec::new(),
            Affinity::List(v) => v.clone(),
            Affinity::Physical => {
                let mut o = topo.primary_cpus();
                o.extend(topo.secondary_cpus());
                o
            }
        };
        (0..lanes).map(|i| order.get(i).copied()).collect()
    }
}

/// A lane could not be pinned; the lane still runs, unpinned. Log it as a warning.
#[derive(Debug)]
pub struct PinError {
    pub cpu: usize,
    pub error: std::io::Error,
}

impl fmt::Display for PinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "could not pin thread to CPU {}: {}",
            self.cpu, self.error
        )
    }
}

impl std::error::Error for PinError {}

/// Pins the calling thread to `cpu` (`None`: leaves it alone). Never panics.
pub fn pin_current(cpu: Option<usize>) -> Result<(), PinError> {
    match cpu {
        None => Ok(()),
        Some(cpu) => os::pin_current_thread(cpu).map_err(|error| PinError { cpu, error }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses() {
        assert_eq!("physical".parse::<Affinity>().unwrap(), Affinity::Physical);
        assert_eq!(" OFF ".parse::<Affinity>().unwrap(), Affinity::Off);
        assert_eq!(
            "0,2,4-6".parse::<Affinity>().unwrap(),
            Affinity::List(vec![0, 2, 4, 5, 6])
        );
        assert_eq!(
            "3,1".parse::<Affinity>().unwrap(),
            Affinity::List(vec![3, 1])
        );
        for bad in ["", "phys", "1,x", "4-", "3-1", "1,1", "1,,2"] {
            let e = bad.parse::<Affinity>().unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
        assert!("1,x"
            .parse::<Affinity>()
            .unwrap_err()
            .to_string()
            .contains("\"x\""));
        assert_eq!(
            "0,2,4-6".parse::<Affinity>().unwrap().to_string(),
            "0,2,4,5,6"
        );
    }

    #[test]
    fn plans() {
        let topo = Topology::flat(&[0, 1, 2]);
        assert_eq!(Affinity::Physical.plan(2, &topo), vec![Some(0), Some(1)]);
        assert_eq!(
            Affinity::Physical.plan(4, &topo),
            vec![Some(0), Some(1), Some(2), None]
        );
        assert_eq!(Affinity::Off.plan(2, &topo), vec![None, None]);
        assert_eq!(
            Affinity::List(vec![5, 3]).plan(3, &topo),
            vec![Some(5), Some(3), None]
        );
    }

    #[test]
    fn pin_failure_is_an_error_value() {
        let e = std::thread::spawn(|| pin_current(Some(100_000)))
            .join()
            .unwrap();
        assert!(e.is_err());
        assert!(e.unwrap_err().to_string().contains("100000"));
    }
}
