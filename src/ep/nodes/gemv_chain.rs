//! Which M=1 weight stream of a session runs after which, learned from the calls themselves, so
//! that a MatMulNBits call can ask the idle lanes to read the next call's weights ahead while
//! the caller runs the nodes in between (`Par::idle_read`).
//!
//! Nothing is trusted: every call tells its predecessor (the session's previous M=1 call) who
//! came next, and a link answers [`Link::next`] only after it saw the same successor twice in a
//! row; one different successor withdraws the answer until that one repeats. A wrong answer
//! (sessions run from several threads at once, a graph with branches) costs only a useless read
//! ahead, never a wrong result: the hint only warms caches (and holds its weight weakly,
//! `runtime::warm`).

use parking_lot::Mutex;
use std::sync::Arc;

/// The latest M=1 call of one session (one per `KernelEnv`).
pub struct Chain<T> {
    last: Mutex<Option<Arc<Link<T>>>>,
}

impl<T> Default for Chain<T> {
    fn default() -> Self {
        Chain {
            last: Mutex::new(None),
        }
    }
}

/// One node's place in the chain: its weights and the successor seen after it.
pub struct Link<T> {
    item: Arc<T>,
    next: Mutex<Next<T>>,
}

struct Next<T> {
    item: Option<Arc<T>>,
    confirmed: bool,
}

impl<T> Chain<T> {
    /// Records that `link`'s node runs now: the previous call's link learns it as its successor.
    pub fn ran(&self, link: &Arc<Link<T>>) {
        let prev = self.last.lock().replace(link.clone());
        if let Some(p) = prev {
            p.saw_next(&link.item);
        }
    }
}

impl<T> Link<T> {
    /// A link for a node whose weights are `item`.
    pub fn new(item: Arc<T>) -> Arc<Link<T>> {
        Arc::new(Link {
            item,
            next: Mutex::new(Next {
                item: None,
                confirmed: false,
            }),
        })
    }

    fn saw_next(&self, item: &Arc<T>) {
        let mut n = self.next.lock();
        match &n.item {
            Some(x) if Arc::ptr_eq(x, item) => n.confirmed = true,
            _ => {
                *n = Next {
                    item: Some(item.clone()),
                    confirmed: false,
                }
            }
        }
    }

    /// The weights that followed this node the last two times in a row; `None` otherwise.
    pub fn next(&self) -> Option<Arc<T>> {
        let n = self.next.lock();
        n.item.clone().filter(|_| n.confirmed)
    }
}
