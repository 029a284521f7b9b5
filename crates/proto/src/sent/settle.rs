//! The settle queue: packets in flight ordered by the symbol the peer's cumulative ACK must
//! reach to make them obsolete (`settle_key`), smallest first.
//!
//! Why not a plain binary heap: almost every packet is pushed with a key no smaller than
//! the last one (sources in id order, repairs ending at the window's end), and a heap pays
//! a logarithmic sift through memory that went cold for each of them, on the sender's
//! per-packet path. Those in-order pushes go to the back of a deque and come off its front
//! in constant time; only the rest (a reactive repair of an older range) go to the heap.
//! Packet numbers only grow, so a key no smaller than the deque's last keeps the deque
//! sorted by `(key, number)`, and the smaller of the two fronts is the heap's minimum.

use ctcp_rlnc::SymbolId;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// `(settle key, packet number)` pairs, smallest first (see the module docs).
#[derive(Debug, Clone, Default)]
pub(super) struct SettleQueue {
    /// Pushed in order: sorted by `(key, number)`.
    run: VecDeque<(SymbolId, u64)>,
    /// Pushed out of order.
    rest: BinaryHeap<Reverse<(SymbolId, u64)>>,
}

impl SettleQueue {
    /// Adds packet `pn` with settle key `key`; `pn` is larger than any pushed before.
    pub(super) fn push(&mut self, key: SymbolId, pn: u64) {
        if self.run.back().is_none_or(|&(k, _)| key >= k) {
            self.run.push_back((key, pn));
        } else {
            self.rest.push(Reverse((key, pn)));
        }
    }

    /// The smallest `(key, number)`.
    pub(super) fn peek(&self) -> Option<(SymbolId, u64)> {
        match (self.run.front(), self.rest.peek()) {
            (Some(&a), Some(&Reverse(b))) => Some(a.min(b)),
            (Some(&a), None) => Some(a),
            (None, Some(&Reverse(b))) => Some(b),
            (None, None) => None,
        }
    }

    /// Removes and returns the smallest `(key, number)`.
    pub(super) fn pop(&mut self) -> Option<(SymbolId, u64)> {
        // Packet numbers are unique, so the smallest pair is at exactly one front.
        let min = self.peek()?;
        if self.run.front() == Some(&min) {
            self.run.pop_front()
        } else {
            self.rest.pop().map(|Reverse(e)| e)
        }
    }

    /// Entries held, obsolete ones included.
    pub(super) fn len(&self) -> usize {
        self.run.len() + self.rest.len()
    }
}

impl FromIterator<(SymbolId, u64)> for SettleQueue {
    /// A queue of `(key, number)` pairs given in increasing number order.
    fn from_iter<I: IntoIterator<Item = (SymbolId, u64)>>(iter: I) -> Self {
        let mut q = SettleQueue::default();
        for (key, pn) in iter {
            q.push(key, pn);
        }
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any mix of pushes (numbers increasing, keys anywhere) and pops gives what a
        /// binary heap of the same pairs gives.
        #[test]
        fn pops_as_a_binary_heap_does(ops in proptest::collection::vec((any::<bool>(), 0u64..64), 0..400)) {
            let mut q = SettleQueue::default();
            let mut heap = BinaryHeap::new();
            let mut pn = 0;
            for (push, key) in ops {
                if push {
                    q.push(key, pn);
                    heap.push(Reverse((key, pn)));
                    pn += 1;
                } else {
                    prop_assert_eq!(q.pop(), heap.pop().map(|Reverse(e)| e));
                }
                prop_assert_eq!(q.peek(), heap.peek().map(|&Reverse(e)| e));
                prop_assert_eq!(q.len(), heap.len());
            }
            while let Some(Reverse(e)) = heap.pop() {
                prop_assert_eq!(q.pop(), Some(e));
            }
            prop_assert_eq!(q.pop(), None);
        }
    }

    #[test]
    fn in_order_pushes_stay_out_of_the_heap() {
        let q: SettleQueue = [(1, 0), (2, 1), (2, 2), (5, 3)].into_iter().collect();
        assert_eq!(q.rest.len(), 0);
        assert_eq!(q.peek(), Some((1, 0)));
    }
}
