//! The M=1 streaming split (`par::stream_units_per_chunk`): long chunks, but never fewer than a
//! few per lane when there are enough units, and never an empty chunk; `StreamSplit`: the
//! same runs spread evenly over a chunk count that is a multiple of the lanes.

use rcpu::runtime::par::{
    set_stream_schedule, stream_units_per_chunk, Par, ScopedThreads, SegmentClaims, StreamSchedule,
    StreamSplit, GUIDED_TAIL_MIN_BYTES, STREAM_CHUNK_MAX_BYTES, STREAM_MIN_CHUNKS_PER_LANE,
};
use rcpu::runtime::segments::MAX_SEGMENTS;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

#[test]
fn chunks_are_long_but_leave_every_lane_several() {
    for lanes in [1usize, 2, 3, 8] {
        for units in [0usize, 1, 7, 64, 448, 2688, 100_000] {
            for unit_bytes in [1usize, 4096, 65_536, 262_144, 1 << 22, 1 << 24] {
                let per = stream_units_per_chunk(units, unit_bytes, lanes);
                let ctx = format!("lanes={lanes} units={units} unit_bytes={unit_bytes}: {per}");
                assert!(per >= 1, "{ctx}");
                // Never past the byte cap, unless one unit alone is bigger.
                assert!(
                    per == 1 || per * unit_bytes <= STREAM_CHUNK_MAX_BYTES,
                    "{ctx}"
                );
                // Enough units: at least STREAM_MIN_CHUNKS_PER_LANE chunks per lane.
                if units >= STREAM_MIN_CHUNKS_PER_LANE * lanes {
                    let chunks = units.div_ceil(per);
                    assert!(chunks >= STREAM_MIN_CHUNKS_PER_LANE * lanes, "{ctx}");
                }
                // Long: as many units as the byte cap and floor(units / (min chunks * lanes))
                // both allow.
                let cap_units = (STREAM_CHUNK_MAX_BYTES / unit_bytes).max(1);
                let balance_units = units / (STREAM_MIN_CHUNKS_PER_LANE * lanes);
                assert!(per >= cap_units.min(balance_units), "{ctx}: too short");
            }
        }
    }
}

#[test]
fn decode_shapes() {
    // f32 K=N=2048, 32-wide panels (256 KiB each), two lanes: 8 chunks of 8 panels.
    assert_eq!(stream_units_per_chunk(64, 2048 * 32 * 4, 2), 8);
    // MatMulNBits K=4096 N=57344: 1792 groups of 64 KiB: 4 MiB chunks.
    assert_eq!(stream_units_per_chunk(1792, 65_536, 2), 64);
}

#[test]
fn stream_split_is_even_and_a_multiple_of_the_lanes() {
    for lanes in [1usize, 2, 3, 8] {
        for units in [0usize, 1, 2, 7, 28, 36, 152, 448, 2688, 4748, 100_000] {
            for unit_bytes in [1usize, 4096, 16_576, 65_536, 262_144, 1 << 22] {
                let s = StreamSplit::new(units, unit_bytes, lanes);
                let ctx = format!("lanes={lanes} units={units} unit_bytes={unit_bytes}: {s:?}");
                let per = stream_units_per_chunk(units, unit_bytes, lanes);
                // Every unit exactly once, in order, no empty chunk.
                let mut next = 0;
                let (mut shortest, mut longest) = (usize::MAX, 0);
                for i in 0..s.chunks() {
                    let r = s.range(i);
                    assert_eq!(r.start, next, "{ctx}: chunk {i}");
                    assert!(!r.is_empty(), "{ctx}: chunk {i} empty");
                    (shortest, longest) = (shortest.min(r.len()), longest.max(r.len()));
                    next = r.end;
                }
                assert_eq!(next, units, "{ctx}: units not covered");
                if units == 0 {
                    assert_eq!(s.chunks(), 0, "{ctx}");
                    continue;
                }
                // Even, and never longer than stream_units_per_chunk's runs.
                assert!(longest - shortest <= 1 && longest <= per, "{ctx}");
                // Several chunks: as many per lane (a multiple of the lanes, units allowing).
                if s.chunks() > 1 {
                    assert!(
                        s.chunks().is_multiple_of(lanes) || s.chunks() == units,
                        "{ctx}: chunk count not a multiple of the lanes"
                    );
                }
            }
        }
    }
}

#[test]
fn stream_split_decode_shapes() {
    // Qwen2-0.5B at acc 4, two lanes, K=896: 14336 weight bytes per group. qkv: 36 groups in
    // 10 chunks, not 9 of 4.
    let qkv = StreamSplit::new(36, 14_336, 2);
    assert_eq!(qkv.chunks(), 10);
    assert_eq!((qkv.range(0), qkv.range(9)), (0..3, 32..36));
    // lm_head: 4748 groups in 18 chunks of 263 or 264, not 16 of 292 plus one of 76.
    let lm = StreamSplit::new(4748, 14_336, 2);
    assert_eq!(lm.chunks(), 18);
    assert!((0..18).all(|i| (263..=264).contains(&lm.range(i).len())));
}

#[test]
fn guided_split_covers_every_unit_once_long_chunks_first() {
    for lanes in [1usize, 2, 3, 8] {
        for units in [0usize, 1, 2, 7, 28, 36, 152, 448, 2688, 4748, 100_000] {
            for unit_bytes in [1usize, 4096, 14_336, 38_912, 65_536, 1 << 22] {
                let s = StreamSplit::guided(units, unit_bytes, lanes);
                let ctx = format!("lanes={lanes} units={units} unit_bytes={unit_bytes}: {s:?}");
                let max = (STREAM_CHUNK_MAX_BYTES / unit_bytes).max(1);
                let min = (GUIDED_TAIL_MIN_BYTES / unit_bytes).max(1);
                // Every unit exactly once, in order, no empty chunk.
                let mut next = 0;
                let mut prev = usize::MAX;
                for i in 0..s.chunks() {
                    let r = s.range(i);
                    assert_eq!(r.start, next, "{ctx}: chunk {i}");
                    assert!(!r.is_empty(), "{ctx}: chunk {i} empty");
                    assert!(r.len() <= max, "{ctx}: chunk {i} longer than the byte cap");
                    // Never longer than the chunk before; shorter than the tail minimum only
                    // as the very last chunk (what is left).
                    assert!(r.len() <= prev, "{ctx}: chunk {i} grew");
                    assert!(
                        r.len() >= min || i + 1 == s.chunks(),
                        "{ctx}: chunk {i} below the tail minimum"
                    );
                    // The guided rule itself: 1 / (2 * lanes) of what is left, clamped.
                    let want = (units - next).div_ceil(2 * lanes).clamp(min, max);
                    assert_eq!(r.len(), want.min(units - next), "{ctx}: chunk {i}");
                    prev = r.len();
                    next = r.end;
                }
                assert_eq!(next, units, "{ctx}: units not covered");
                assert_eq!(s.chunks() == 0, units == 0, "{ctx}");
            }
        }
    }
}

#[test]
fn guided_split_decode_shapes() {
    // Qwen2-0.5B gate (K=896: 14336 bytes per group, 152 groups), two lanes: a quarter of what
    // is left each time, a one-group tail.
    let gate = StreamSplit::guided(152, 14_336, 2);
    let lens: Vec<usize> = (0..gate.chunks()).map(|i| gate.range(i).len()).collect();
    assert_eq!(
        lens,
        [38, 29, 22, 16, 12, 9, 7, 5, 4, 3, 2, 2, 1, 1, 1],
        "{gate:?}"
    );
    // The schedule knob picks the split M=1 MatMulNBits uses.
    set_stream_schedule(StreamSchedule::Guided);
    assert_eq!(StreamSplit::decode(152, 14_336, 2), gate);
    set_stream_schedule(StreamSchedule::Even);
    assert_eq!(
        StreamSplit::decode(152, 14_336, 2),
        StreamSplit::new(152, 14_336, 2)
    );
    set_stream_schedule(StreamSchedule::Segmented);
}

/// Runs every chunk of a segmented split of `units` in `order` (one lane) and returns each
/// chunk's runs.
fn runs_in_order(s: &StreamSplit, order: &[usize]) -> Vec<Vec<std::ops::Range<usize>>> {
    let claims = SegmentClaims::new();
    let mut out = vec![vec![]; s.chunks()];
    for &i in order {
        s.run(i, &claims, &mut |r| out[i].push(r));
    }
    out
}

#[test]
fn segmented_split_covers_every_unit_once_in_any_chunk_order() {
    for lanes in [1usize, 2, 3, 8, MAX_SEGMENTS, MAX_SEGMENTS + 1] {
        for units in [0usize, 1, 2, 7, 28, 36, 152, 448, 4748, 100_000] {
            for unit_bytes in [1usize, 14_336, 77_824, 1 << 22] {
                let s = StreamSplit::segmented(units, unit_bytes, lanes);
                let ctx = format!("lanes={lanes} units={units} unit_bytes={unit_bytes}: {s:?}");
                assert_eq!(s.chunks(), lanes.min(MAX_SEGMENTS).min(units), "{ctx}");
                let max = (STREAM_CHUNK_MAX_BYTES / unit_bytes).max(1);
                let n = s.chunks();
                // In index order, reversed, and rotated: whoever runs first takes its own
                // segment and what the others left.
                let orders: [Vec<usize>; 3] = [
                    (0..n).collect(),
                    (0..n).rev().collect(),
                    (0..n).map(|i| (i + n / 2) % n.max(1)).collect(),
                ];
                for (o, order) in orders.iter().enumerate() {
                    let runs = runs_in_order(&s, order);
                    let mut seen = vec![0u8; units];
                    for (i, rs) in runs.iter().enumerate() {
                        for r in rs {
                            assert!(!r.is_empty() && r.len() <= max, "{ctx} order {o}: {r:?}");
                            for u in r.clone() {
                                seen[u] += 1;
                            }
                        }
                        // A chunk's first runs are its own segment, front to back, contiguous.
                        let seg = s.range(i);
                        let mut at = seg.start;
                        for r in rs.iter().take_while(|r| seg.contains(&r.start)) {
                            if r.start != at {
                                break;
                            }
                            at = r.end;
                        }
                        if o == 0 && i == 0 {
                            // Ran first: its whole segment in one contiguous pass.
                            assert_eq!(at, seg.end, "{ctx}: chunk 0 did not stream its segment");
                        }
                    }
                    assert!(seen.iter().all(|&c| c == 1), "{ctx} order {o}: {seen:?}");
                }
            }
        }
    }
}

#[test]
fn segmented_split_first_runs_and_shapes() {
    // Qwen2-0.5B gate (152 groups of 14336 bytes), two lanes: segments of 76 groups, each
    // claimed front to back in quarters of what is left.
    let gate = StreamSplit::segmented(152, 14_336, 2);
    assert_eq!(gate.chunks(), 2);
    assert_eq!((gate.range(0), gate.range(1)), (0..76, 76..152));
    // Chunk 1 claimed first: its first run is the first quarter of its own segment.
    assert_eq!(runs_in_order(&gate, &[1, 0])[1][0], 76..95);
    let runs = runs_in_order(&gate, &[0, 1]);
    let lens: Vec<usize> = runs[0].iter().map(|r| r.len()).collect();
    let quarters = [19, 15, 11, 8, 6, 5, 3, 3, 2, 1, 1, 1, 1];
    assert_eq!(lens, [quarters, quarters].concat(), "{runs:?}");
    // Chunk 0 ran alone first: its own segment front to back, then all of segment 1 from the
    // far end (runs in descending order); chunk 1 found nothing left.
    assert_eq!(runs[0][..2], [0..19, 19..34], "{runs:?}");
    assert_eq!(runs[0][13..15], [133..152, 118..133], "{runs:?}");
    assert_eq!(runs[0].last(), Some(&(76..77)), "{runs:?}");
    assert!(runs[1].is_empty());
    // The default decode schedule is segmented; with more lanes than segments it is guided.
    set_stream_schedule(StreamSchedule::Segmented);
    assert_eq!(StreamSplit::decode(152, 14_336, 2), gate);
    assert_eq!(
        StreamSplit::decode(152, 14_336, MAX_SEGMENTS + 1),
        StreamSplit::guided(152, 14_336, MAX_SEGMENTS + 1)
    );
}

#[test]
fn segmented_split_is_exact_under_concurrency() {
    // Real threads race for the same segments: still every unit exactly once.
    for threads in [2usize, 3, 4] {
        for units in [3usize, 152, 1000] {
            for _ in 0..50 {
                let s = StreamSplit::segmented(units, 14_336, threads);
                let claims = SegmentClaims::new();
                let hits: Vec<AtomicUsize> = (0..units).map(|_| AtomicUsize::new(0)).collect();
                let runs = Mutex::new(0usize);
                ScopedThreads(threads).chunks(rcpu::runtime::Dispatch::Decode, s.chunks(), &|i| {
                    s.run(i, &claims, &mut |r| {
                        *runs.lock().unwrap() += 1;
                        for u in r {
                            hits[u].fetch_add(1, Ordering::Relaxed);
                        }
                    });
                });
                let ctx = format!("threads={threads} units={units}");
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "{ctx}");
                assert!(*runs.lock().unwrap() >= s.chunks(), "{ctx}");
            }
        }
    }
}
