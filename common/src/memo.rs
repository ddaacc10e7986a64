//! One-entry memos of pure functions of a request's bytes, one per thread.
//!
//! A browser sends the same `User-Agent`, `Accept-Language` and (behind a
//! proxy) `X-Forwarded-For` with every request of a keep-alive connection,
//! and a connection is served by one thread: remembering the last answer
//! turns a repeat into a byte compare. A request with other bytes pays the
//! compare and the function, as before. Used by the link rules (issue 25,
//! item 8) the way the click counter remembers the last device class.

use std::cell::RefCell;
use std::thread::LocalKey;

/// The last key (at most `max` bytes) and its value.
pub struct Last<V: Copy> {
    key: Vec<u8>,
    value: Option<V>,
}

impl<V: Copy> Last<V> {
    pub const fn new() -> Last<V> {
        Last {
            key: Vec::new(),
            value: None,
        }
    }
}

impl<V: Copy> Default for Last<V> {
    fn default() -> Self {
        Last::new()
    }
}

/// `f()`, or the value remembered in `slot` for these `key` bytes. Keys
/// longer than `max` are never remembered (the copy would cost more than
/// it saves).
pub fn remembered<V: Copy + 'static>(
    slot: &'static LocalKey<RefCell<Last<V>>>,
    key: &[u8],
    max: usize,
    f: impl FnOnce() -> V,
) -> V {
    if key.len() > max {
        return f();
    }
    slot.with(|last| {
        let Ok(mut last) = last.try_borrow_mut() else {
            return f();
        };
        if let (true, Some(v)) = (last.key == key, last.value) {
            return v;
        }
        let v = f();
        last.key.clear();
        last.key.extend_from_slice(key);
        last.value = Some(v);
        v
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        static SLOT: RefCell<Last<usize>> = const { RefCell::new(Last::new()) };
    }

    #[test]
    fn repeats_are_answered_from_the_memo_and_others_computed() {
        let calls = Cell::new(0);
        let len = |k: &[u8]| {
            remembered(&SLOT, k, 8, || {
                calls.set(calls.get() + 1);
                k.len()
            })
        };
        assert_eq!((len(b"abc"), len(b"abc"), calls.get()), (3, 3, 1));
        assert_eq!((len(b"abcd"), len(b"abc"), calls.get()), (4, 3, 3));
        assert_eq!(
            (len(b"0123456789"), len(b"0123456789"), calls.get()),
            (10, 10, 5)
        );
        assert_eq!(
            (len(b"abc"), calls.get()),
            (3, 5),
            "a long key leaves the memo"
        );
    }
}
