//! The bound on referrer rows per link-day (issue 23, item 8), and on the
//! named values of a link-day-dimension (protocol 3.7: `apply` folds both
//! with [`fold`]).
//!
//! An edge folds the hosts past a batch's top 20 per link-day into
//! `~other`, but every batch of every edge may name 20 *new* hosts, so
//! rotating `Referer` hosts would add rows without end and push spam into a
//! merchant's top referrers. The origin therefore keeps, per (code, day), at
//! most `clicks.referrers_per_day` named hosts plus `~other`, whatever the
//! edges send: each batch's lines for a link-day are merged with the rows
//! already stored (read under lock in the same transaction), the hosts
//! ranked by their stored-plus-new count, and the ones past the top N —
//! new or stored — are summed into `~other` (a stored one's row deleted).
//! The day's total is unchanged by folding, so the sum of a day's referrer
//! counts stays the clicks of the day.
//!
//! Ties keep the host already stored (no churn), then the smaller name. A
//! host's clicks from before it reached the top N stay in `~other`: a named
//! count is exact from the moment its row exists, a lower bound overall.
//! Spam from rotating hosts, one or two clicks each, competes for the slots
//! the real referrers (many clicks each) leave free, and is folded as soon
//! as it would push the table past N.
//!
//! Pure: no I/O, so every case is a unit test.

use shorturl_common::clicks::OTHER_REFERRER;
use std::collections::HashMap;

/// What to write for one link-day.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Fold {
    /// `(host, n)` to add to the stored count (a new row when absent);
    /// `~other` included when something is folded into it.
    pub add: Vec<(String, u64)>,
    /// Stored hosts whose rows go (their counts are in `add`'s `~other`).
    pub delete: Vec<String>,
}

/// The writes that merge `incoming` lines into the `stored` rows of one
/// link-day, keeping at most `top` named hosts and `~other`.
pub fn fold(stored: &[(String, u64)], incoming: &[(String, u64)], top: usize) -> Fold {
    // host -> (stored n, incoming n)
    let mut hosts: HashMap<&str, (u64, u64)> = HashMap::new();
    let mut other = 0u64;
    for (host, n) in stored {
        if host != OTHER_REFERRER {
            hosts.entry(host).or_default().0 += n;
        }
    }
    for (host, n) in incoming {
        if host == OTHER_REFERRER {
            other += n;
        } else {
            hosts.entry(host).or_default().1 += n;
        }
    }
    let mut ranked: Vec<(&str, u64, u64)> =
        hosts.into_iter().map(|(h, (s, i))| (h, s, i)).collect();
    // Most clicks first; on a tie the row already stored, then the name.
    ranked.sort_by(|a, b| {
        (b.1 + b.2)
            .cmp(&(a.1 + a.2))
            .then_with(|| (b.1 > 0).cmp(&(a.1 > 0)))
            .then_with(|| a.0.cmp(b.0))
    });
    let mut out = Fold::default();
    for (i, (host, stored_n, incoming_n)) in ranked.into_iter().enumerate() {
        if i < top {
            if incoming_n > 0 {
                out.add.push((host.to_owned(), incoming_n));
            }
        } else {
            other += stored_n + incoming_n;
            if stored_n > 0 {
                out.delete.push(host.to_owned());
            }
        }
    }
    if other > 0 {
        out.add.push((OTHER_REFERRER.to_owned(), other));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(v: &[(&str, u64)]) -> Vec<(String, u64)> {
        v.iter().map(|(h, n)| ((*h).to_owned(), *n)).collect()
    }

    /// The stored rows after applying `f` to `stored`.
    fn after(stored: &[(String, u64)], f: &Fold) -> Vec<(String, u64)> {
        let mut m: HashMap<String, u64> = stored.iter().cloned().collect();
        for h in &f.delete {
            assert!(m.remove(h).is_some(), "deleting a missing row {h}");
        }
        for (h, n) in &f.add {
            *m.entry(h.clone()).or_default() += n;
        }
        let mut v: Vec<_> = m.into_iter().collect();
        v.sort();
        v
    }

    #[test]
    fn under_the_bound_everything_is_added() {
        let stored = rows(&[("a.example", 5), ("-", 2)]);
        let f = fold(&stored, &rows(&[("a.example", 1), ("b.example", 3)]), 3);
        assert!(f.delete.is_empty());
        assert_eq!(
            after(&stored, &f),
            rows(&[("-", 2), ("a.example", 6), ("b.example", 3)])
        );
    }

    #[test]
    fn new_hosts_past_the_bound_are_folded() {
        let stored = rows(&[("a.example", 50), ("b.example", 40)]);
        let incoming = rows(&[("spam1.example", 1), ("spam2.example", 1), ("~other", 4)]);
        let f = fold(&stored, &incoming, 2);
        assert_eq!(f.add, rows(&[("~other", 6)]));
        assert!(f.delete.is_empty());
    }

    #[test]
    fn a_stronger_new_host_evicts_the_weakest_stored_one() {
        let stored = rows(&[("a.example", 50), ("weak.example", 2), ("~other", 7)]);
        let incoming = rows(&[("big.example", 30), ("weak.example", 1)]);
        let f = fold(&stored, &incoming, 2);
        assert_eq!(f.delete, vec!["weak.example".to_owned()]);
        assert_eq!(
            after(&stored, &f),
            rows(&[("a.example", 50), ("big.example", 30), ("~other", 10)])
        );
    }

    #[test]
    fn ties_keep_the_stored_host() {
        let stored = rows(&[("z.example", 1)]);
        let f = fold(&stored, &rows(&[("a.example", 1)]), 1);
        assert!(f.delete.is_empty());
        assert_eq!(f.add, rows(&[("~other", 1)]));
    }

    #[test]
    fn too_many_stored_rows_are_cut_back() {
        // Rows from before the bound (or a lowered `referrers_per_day`).
        let stored = rows(&[("a", 5), ("b", 4), ("c", 3), ("d", 2), ("~other", 1)]);
        let f = fold(&stored, &rows(&[("d", 1)]), 2);
        let mut del = f.delete.clone();
        del.sort();
        assert_eq!(del, vec!["c".to_owned(), "d".to_owned()]);
        assert_eq!(
            after(&stored, &f),
            rows(&[("a", 5), ("b", 4), ("~other", 7)])
        );
    }

    #[test]
    fn any_sequence_of_batches_keeps_the_bound_and_the_total() {
        let top = 3;
        let mut stored: Vec<(String, u64)> = Vec::new();
        let mut total = 0;
        for batch in 0..50u64 {
            // One steady referrer, one growing, and rotating spam.
            let mut incoming = rows(&[("real.example", 5), ("-", 3)]);
            incoming.push((format!("spam{batch}.example"), 1 + batch % 2));
            incoming.push((format!("spam{batch}b.example"), 1));
            if batch > 10 {
                incoming.push(("late.example".to_owned(), 4));
            }
            total += incoming.iter().map(|(_, n)| n).sum::<u64>();
            stored = after(&stored, &fold(&stored, &incoming, top));
            let named = stored.iter().filter(|(h, _)| h != OTHER_REFERRER).count();
            assert!(named <= top, "batch {batch}: {stored:?}");
            assert_eq!(stored.iter().map(|(_, n)| n).sum::<u64>(), total);
        }
        let names: Vec<&str> = stored.iter().map(|(h, _)| h.as_str()).collect();
        assert_eq!(names, vec!["-", "late.example", "real.example", "~other"]);
    }
}
