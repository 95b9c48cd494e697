//! The learned order of a session's M=1 MatMulNBits calls (`ep::nodes::gemv_chain`): a
//! link names its successor only after seeing the same one twice in a row.

use rcpu::ep::nodes::gemv_chain::{Chain, Link};
use std::sync::Arc;

/// Seen failing: with `Link::next` answering the first successor seen (unconfirmed), and with
/// a different successor not withdrawing the answer.
#[test]
fn successor_is_answered_only_when_seen_twice_in_a_row() {
    let chain = Chain::default();
    let (a, b, c) = (
        Link::new(Arc::new(1)),
        Link::new(Arc::new(2)),
        Link::new(Arc::new(3)),
    );
    let next = |l: &Arc<Link<i32>>| l.next().map(|x| *x);
    // First token: a, b, c.
    for l in [&a, &b, &c] {
        chain.ran(l);
    }
    assert_eq!((next(&a), next(&b), next(&c)), (None, None, None));
    // Second token: the same order confirms a -> b, b -> c, and c -> a is seen once.
    for l in [&a, &b, &c] {
        chain.ran(l);
    }
    assert_eq!((next(&a), next(&b), next(&c)), (Some(2), Some(3), None));
    // A different successor of a (a branch, another thread's run) withdraws the answer...
    chain.ran(&a);
    chain.ran(&c);
    assert_eq!(next(&a), None);
    assert_eq!(next(&c), Some(1), "c -> a seen twice");
    // ...until it repeats.
    chain.ran(&a);
    chain.ran(&c);
    assert_eq!(next(&a), Some(3));
}
