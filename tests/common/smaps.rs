//! /proc and /sys readers of the huge-page tests (`tests/memory/memory_huge_pages.rs`,
//! `tests/serial/memory_weight_arena.rs`), included with `#[path] mod`.
#![allow(dead_code)]

/// The transparent-huge-page mode (`always`, `madvise`, `never`), `None` where unreadable.
pub(crate) fn thp_mode() -> Option<String> {
    let s = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?;
    let start = s.find('[')? + 1;
    let end = s[start..].find(']')? + start;
    Some(s[start..end].to_string())
}

/// The /proc/self/smaps block (header line included) of the mapping that contains `addr`.
pub(crate) fn smaps_block(addr: usize) -> String {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("read smaps");
    let mut block: Option<String> = None;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((lo, hi)) = first.split_once('-') {
            if let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                if block.is_some() {
                    break;
                }
                if lo <= addr && addr < hi {
                    block = Some(String::new());
                }
            }
        }
        if let Some(b) = block.as_mut() {
            b.push_str(line);
            b.push('\n');
        }
    }
    block.unwrap_or_else(|| panic!("no mapping holds {addr:#x}"))
}
