//! A warm f32 GEMM (and GEMV) takes its packing (x/y) buffers from the lane's parked scratch: repeated calls
//! allocate no fresh scratch (in `tests/serial/`: the scratch counters are global).

use rcpu::kernels::gemm::{pack_weight, Op, Sgemm, Weight};
use rcpu::memory::scratch_stats;

#[test]
fn warm_gemm_allocates_no_packing_buffers() {
    let _serial = crate::serial();
    let (m, n, k) = (200, 300, 400);
    let a: Vec<f32> = (0..m * k).map(|i| (i % 13) as f32 * 0.25 - 1.0).collect();
    let b: Vec<f32> = (0..k * n).map(|i| (i % 7) as f32 * 0.5 - 1.5).collect();
    let mut c = vec![0f32; m * n];
    let mut first = vec![0f32; m * n];
    let call = Sgemm::new(m, n, k, &a);
    let bop = Op {
        data: &b,
        ld: n,
        trans: false,
    };
    call.run(bop, &mut first).unwrap();
    let warm = scratch_stats();
    for _ in 0..10 {
        call.run(bop, &mut c).unwrap();
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

    // GEMV shapes (m = 1 and n = 1, both transposes): x and y come from the same scratch.
    for (mm, nn, ta, tb) in [
        (1, n, false, false),
        (1, n, true, true),
        (m, 1, false, false),
        (m, 1, true, true),
    ] {
        let lda = if ta { mm } else { k };
        let ldb = if tb { k } else { nn };
        let mut y1 = vec![0f32; mm * nn];
        let call = Sgemm::new(mm, nn, k, &a).lda(lda, ta).alpha(0.5);
        let bop = Op {
            data: &b,
            ld: ldb,
            trans: tb,
        };
        call.run(bop, &mut y1).unwrap();
        let warm = scratch_stats();
        let mut y = vec![0f32; mm * nn];
        for _ in 0..10 {
            call.run(bop, &mut y).unwrap();
        }
        let now = scratch_stats();
        let shape = format!("m={mm} n={nn} transA={ta} transB={tb}");
        assert_eq!(
            now.fresh_allocations, warm.fresh_allocations,
            "{shape}: a warm GEMV allocated"
        );
        assert!(
            now.reuses >= warm.reuses + 10,
            "{shape}: scratch not reused"
        );
        assert_eq!(y, y1, "{shape}: results depend on scratch reuse");
    }

    // Constant-B routes (prepacked and unpacked weight, M = 1 and M > 1, both transposes): the
    // shared packed A and the gathered panels come from parked scratch too.
    for (mm, tb) in [(1, false), (1, true), (m, false), (m, true)] {
        let ldb = if tb { k } else { n };
        let packed = pack_weight(tb, k, n, &b, ldb);
        for w in [
            Weight::Packed(&packed),
            Weight::Unpacked {
                b: &b,
                ldb,
                trans: tb,
            },
        ] {
            let mut y1 = vec![0f32; mm * n];
            let call = Sgemm::new(mm, n, k, &a);
            call.run_weight(w, &mut y1).unwrap();
            let warm = scratch_stats();
            let mut y = vec![0f32; mm * n];
            for _ in 0..10 {
                call.run_weight(w, &mut y).unwrap();
            }
            let now = scratch_stats();
            let shape = format!(
                "weight m={mm} transB={tb} packed={}",
                matches!(w, Weight::Packed(_))
            );
            assert_eq!(
                now.fresh_allocations, warm.fresh_allocations,
                "{shape}: a warm call allocated scratch"
            );
            assert_eq!(y, y1, "{shape}: results depend on scratch reuse");
        }
    }
}
