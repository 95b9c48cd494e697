//! A warm f32 GEMM takes its packing buffers from the lane's parked scratch: repeated calls
//! allocate no fresh scratch (one test in its own binary: the scratch counters are global).

use rcpu::kernels::gemm::sgemm;
use rcpu::memory::scratch_stats;
use rcpu::runtime::par::Serial;

#[test]
fn warm_gemm_allocates_no_packing_buffers() {
    let (m, n, k) = (200, 300, 400);
    let a: Vec<f32> = (0..m * k).map(|i| (i % 13) as f32 * 0.25 - 1.0).collect();
    let b: Vec<f32> = (0..k * n).map(|i| (i % 7) as f32 * 0.5 - 1.5).collect();
    let mut c = vec![0f32; m * n];
    let mut first = vec![0f32; m * n];
    sgemm(
        false, false, m, n, k, 1.0, &a, k, &b, n, 0.0, &mut first, n, &Serial,
    );
    let warm = scratch_stats();
    for _ in 0..10 {
        sgemm(
            false, false, m, n, k, 1.0, &a, k, &b, n, 0.0, &mut c, n, &Serial,
        );
    }
    let now = scratch_stats();
    assert_eq!(
        now.fresh_allocations, warm.fresh_allocations,
        "a warm GEMM allocated scratch"
    );
    assert!(
        now.reuses >= warm.reuses + 10,
        "the parked buffer was not reused"
    );
    assert_eq!(c, first, "results depend on scratch reuse");
}
