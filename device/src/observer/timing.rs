//! How long the device takes to serve a data move: a log-linear histogram (8 buckets per
//! power of two, so a percentile is within 12.5 % of the true value) that the fabric
//! fills under its lock and the snapshot carries. Constant size, no allocation per
//! sample: recording is two shifts and an add.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Sub-buckets per power of two.
const SUB_BITS: u32 = 3;
const SUB: u64 = 1 << SUB_BITS;
/// Enough for 2^40 ns (18 minutes); longer samples land in the last bucket.
const BUCKETS: usize = 41 * SUB as usize;

/// Service times of one function's moves, in nanoseconds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "SparseTimes", from = "SparseTimes")]
pub struct ServiceTimes {
    counts: Box<[u64; BUCKETS]>,
    count: u64,
    sum_ns: u64,
}

impl Default for ServiceTimes {
    fn default() -> Self {
        Self {
            counts: Box::new([0; BUCKETS]),
            count: 0,
            sum_ns: 0,
        }
    }
}

/// The bucket of `ns`: values below 8 have their own; above, 8 per power of two.
fn bucket(ns: u64) -> usize {
    if ns < SUB {
        return ns as usize;
    }
    let octave = u64::from(63 - ns.leading_zeros());
    let sub = (ns >> (octave - u64::from(SUB_BITS))) & (SUB - 1);
    (((octave - u64::from(SUB_BITS) + 1) * SUB + sub) as usize).min(BUCKETS - 1)
}

/// The smallest value of bucket `i` (the inverse of `bucket`).
fn lower_bound(i: usize) -> u64 {
    let i = i as u64;
    if i < SUB {
        return i;
    }
    let octave = i / SUB - 1 + u64::from(SUB_BITS);
    let sub = i % SUB;
    (1 << octave) | (sub << (octave - u64::from(SUB_BITS)))
}

impl ServiceTimes {
    pub fn record(&mut self, took: Duration) {
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.counts[bucket(ns)] += 1;
        self.count += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn sum_ns(&self) -> u64 {
        self.sum_ns
    }

    /// The `q`-quantile (0 < q <= 1) as the lowest value of its bucket, in ns (as the
    /// JSON form's buckets and `scripts/bench_guests.py` give it: at most 12.5 % low);
    /// `None` without samples.
    pub fn quantile_ns(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, &n) in self.counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(lower_bound(i));
            }
        }
        None
    }
}

/// The JSON form: only the nonzero buckets, as `[lowest ns, count]` pairs, so that a
/// reader can subtract two snapshots without knowing the bucket layout.
#[derive(Serialize, Deserialize)]
struct SparseTimes {
    count: u64,
    sum_ns: u64,
    buckets: Vec<[u64; 2]>,
}

impl From<ServiceTimes> for SparseTimes {
    fn from(t: ServiceTimes) -> Self {
        let buckets = t
            .counts
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(i, &n)| [lower_bound(i), n])
            .collect();
        Self {
            count: t.count,
            sum_ns: t.sum_ns,
            buckets,
        }
    }
}

impl From<SparseTimes> for ServiceTimes {
    fn from(s: SparseTimes) -> Self {
        let mut t = ServiceTimes {
            count: s.count,
            sum_ns: s.sum_ns,
            ..Default::default()
        };
        for [lower, n] in s.buckets {
            let i = bucket(lower);
            t.counts[i] = t.counts[i].saturating_add(n);
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_and_lower_bounds_invert_each_other() {
        for i in 0..BUCKETS {
            assert_eq!(bucket(lower_bound(i)), i, "bucket {i}");
        }
        for ns in [0, 7, 8, 9, 15, 16, 17, 1000, 1_000_000, 123_456_789] {
            let i = bucket(ns);
            assert!(lower_bound(i) <= ns && (i + 1 == BUCKETS || ns < lower_bound(i + 1)));
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_are_within_an_eighth_of_the_samples() {
        let mut t = ServiceTimes::default();
        assert_eq!(t.quantile_ns(0.5), None);
        for us in 1..=100u64 {
            t.record(Duration::from_micros(us));
        }
        let p50 = t.quantile_ns(0.5).unwrap() as f64;
        let p99 = t.quantile_ns(0.99).unwrap() as f64;
        assert!((50_000.0 / 1.125..=50_000.0).contains(&p50), "p50 {p50}");
        assert!((99_000.0 / 1.125..=99_000.0).contains(&p99), "p99 {p99}");
        assert_eq!(t.count(), 100);
        assert_eq!(t.sum_ns(), 5050 * 1000);
    }

    #[test]
    fn the_json_form_round_trips() {
        let mut t = ServiceTimes::default();
        for ns in [3, 900, 900, 45_000, 7_000_000] {
            t.record(Duration::from_nanos(ns));
        }
        let json = serde_json::to_string(&t).unwrap();
        assert!(json.contains("\"buckets\":[[3,1],"), "{json}");
        let back: ServiceTimes = serde_json::from_str(&json).unwrap();
        assert_eq!(back, t);
    }
}
