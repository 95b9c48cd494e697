//! The M=1 streaming split (`par::stream_units_per_chunk`): long chunks, but never fewer than a
//! few per lane when there are enough units, and never an empty chunk.

use rcpu::runtime::par::{
    stream_units_per_chunk, STREAM_CHUNK_MAX_BYTES, STREAM_MIN_CHUNKS_PER_LANE,
};

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
