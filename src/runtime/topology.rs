//! Physical cores and their SMT siblings, as far as this process may use them.
//!
//! Source: `/sys/devices/system/cpu/cpuN/topology/{physical_package_id,core_id,
//! thread_siblings_list}`, intersected with the process affinity mask (`sched_getaffinity`).
//! Without /sys every allowed CPU counts as its own core. The result is deterministic: cores are
//! ordered by their lowest allowed CPU, and within a core the lowest-numbered sibling comes
//! first (that one is the core's "primary" CPU, the one a lane gets).

use crate::os;
use std::collections::BTreeMap;

/// One physical core: the allowed CPUs (SMT siblings) on it, ascending.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Core {
    pub package: Option<usize>,
    pub core_id: Option<usize>,
    pub cpus: Vec<usize>,
}

/// The physical cores this process may run on.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Topology {
    pub cores: Vec<Core>,
}

/// What /sys says about one CPU (each field `None` when the file is missing or unparsable).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CpuInfo {
    pub package: Option<usize>,
    pub core_id: Option<usize>,
    pub siblings: Option<Vec<usize>>,
}

/// Parses a kernel CPU list such as `"0-3,8,10-11"` (whitespace around items is ignored; an
/// empty string is the empty list). Returns the CPUs ascending, without duplicates.
pub fn parse_cpu_list(s: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    let s = s.trim();
    if s.is_empty() {
        return Ok(out);
    }
    for item in s.split(',') {
        let item = item.trim();
        let num = |v: &str| {
            v.trim()
                .parse::<usize>()
                .map_err(|_| format!("bad CPU list item {item:?} in {s:?}"))
        };
        match item.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("descending CPU range {item:?} in {s:?}"));
                }
                if b - a > 1 << 16 {
                    return Err(format!("CPU range {item:?} in {s:?} is implausibly large"));
                }
                out.extend(a..=b);
            }
            None => out.push(num(item)?),
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

fn read_sys(cpu: usize, file: &str) -> Option<String> {
    std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu{cpu}/topology/{file}")).ok()
}

/// Reads what /sys knows about `cpu`.
pub fn read_cpu_info(cpu: usize) -> CpuInfo {
    let num = |f: &str| read_sys(cpu, f).and_then(|s| s.trim().parse::<usize>().ok());
    CpuInfo {
        package: num("physical_package_id"),
        core_id: num("core_id"),
        siblings: read_sys(cpu, "thread_siblings_list").and_then(|s| parse_cpu_list(&s).ok()),
    }
}

impl Topology {
    /// Groups the `allowed` CPUs into physical cores using `info` (testable without /sys).
    ///
    /// Two CPUs share a core when they have the same (package, core_id); when those are
    /// unknown, when they have the same lowest sibling in `thread_siblings_list`; when nothing
    /// is known, each CPU is its own core.
    pub fn from_info(allowed: &[usize], info: impl Fn(usize) -> CpuInfo) -> Topology {
        #[derive(PartialEq, Eq, PartialOrd, Ord)]
        enum Key {
            Ids(usize, usize),
            Sibling(usize),
            Alone(usize),
        }
        let mut allowed = allowed.to_vec();
        allowed.sort_unstable();
        allowed.dedup();
        let mut groups: BTreeMap<Key, Core> = BTreeMap::new();
        for &cpu in &allowed {
            let i = info(cpu);
            let key = match (i.package, i.core_id, &i.siblings) {
                (Some(p), Some(c), _) => Key::Ids(p, c),
                (_, _, Some(s)) if !s.is_empty() => Key::Sibling(s[0]),
                _ => Key::Alone(cpu),
            };
            groups
                .entry(key)
                .or_insert_with(|| Core {
                    package: i.package,
                    core_id: i.core_id,
                    cpus: Vec::new(),
                })
                .cpus
                .push(cpu);
        }
        let mut cores: Vec<Core> = groups.into_values().collect();
        // CPUs were pushed in ascending order, so cpus[0] is each core's lowest sibling.
        cores.sort_by_key(|c| c.cpus[0]);
        Topology { cores }
    }

    /// Every allowed CPU as its own core (the fallback without /sys).
    pub fn flat(allowed: &[usize]) -> Topology {
        Self::from_info(allowed, |_| CpuInfo::default())
    }

    /// The live topology: the process affinity mask grouped with /sys. If the mask cannot be
    /// read, CPU 0 alone is assumed; if /sys is missing, every allowed CPU is its own core.
    pub fn detect() -> Topology {
        let allowed = os::allowed_cpus().unwrap_or_else(|_| vec![0]);
        Self::from_info(&allowed, read_cpu_info)
    }

    /// One CPU per physical core (its lowest allowed sibling), ordered by that CPU.
    pub fn primary_cpus(&self) -> Vec<usize> {
        self.cores.iter().map(|c| c.cpus[0]).collect()
    }

    /// The remaining SMT siblings, ordered by (sibling rank, CPU): all second siblings, then
    /// all third siblings, and so on.
    pub fn secondary_cpus(&self) -> Vec<usize> {
        let mut out = Vec::new();
        let max = self.cores.iter().map(|c| c.cpus.len()).max().unwrap_or(0);
        for rank in 1..max {
            out.extend(self.cores.iter().filter_map(|c| c.cpus.get(rank).copied()));
        }
        out
    }
}

/// Number of physical cores in the process affinity mask (at least 1).
pub fn physical_cores() -> usize {
    Topology::detect().cores.len().max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n").unwrap(),
            vec![0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(parse_cpu_list("5").unwrap(), vec![5]);
        assert_eq!(parse_cpu_list("").unwrap(), Vec::<usize>::new());
        assert_eq!(parse_cpu_list(" 2 , 1,2 ").unwrap(), vec![1, 2]);
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("a").is_err());
        assert!(parse_cpu_list("1,,2").is_err());
        assert!(parse_cpu_list("1-").is_err());
    }

    /// 2 packages x 2 cores x 2 threads, Intel-style numbering (siblings are n and n+4).
    fn smt_info(cpu: usize) -> CpuInfo {
        let core = cpu % 4;
        CpuInfo {
            package: Some(core / 2),
            core_id: Some(core % 2),
            siblings: Some(vec![core, core + 4]),
        }
    }

    #[test]
    fn groups_smt_siblings_and_respects_mask() {
        let t = Topology::from_info(&[0, 1, 2, 3, 4, 5, 6, 7], smt_info);
        assert_eq!(t.cores.len(), 4);
        assert_eq!(t.primary_cpus(), vec![0, 1, 2, 3]);
        assert_eq!(t.secondary_cpus(), vec![4, 5, 6, 7]);
        assert_eq!(t.cores[1].cpus, vec![1, 5]);
        // Mask without CPU 1: core 1 is represented by its sibling 5, ordered last.
        let t = Topology::from_info(&[7, 0, 2, 3, 4, 5], smt_info);
        assert_eq!(t.primary_cpus(), vec![0, 2, 3, 5]);
        assert_eq!(t.secondary_cpus(), vec![4, 7]);
    }

    #[test]
    fn siblings_only_and_no_sys() {
        let sib = |cpu: usize| CpuInfo {
            siblings: Some(vec![cpu & !1, cpu | 1]),
            ..CpuInfo::default()
        };
        let t = Topology::from_info(&[0, 1, 2, 3], sib);
        assert_eq!(t.primary_cpus(), vec![0, 2]);
        let t = Topology::flat(&[3, 1, 2]);
        assert_eq!(t.primary_cpus(), vec![1, 2, 3]);
        assert!(t.secondary_cpus().is_empty());
    }

    #[test]
    fn live_topology_is_nonempty() {
        let t = Topology::detect();
        assert!(!t.cores.is_empty());
        assert!(physical_cores() >= 1);
    }
}
