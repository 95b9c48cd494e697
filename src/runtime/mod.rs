//! Topology, affinity and the pinned worker lanes (decode dispatch and task dispatch).
pub mod par;

pub use par::{Par, Serial};
mod stub_lanes;
pub use stub_lanes::*;
