//! Histograms of fixed size: recording is an index and an add, and a guest that keeps
//! producing samples for ever cannot grow one. One core (`Buckets`: counts and the
//! rank search) under two layouts, each with the JSON form its readers know:
//!
//! - [`ServiceTimes`]: log-linear nanoseconds (8 buckets per power of two, so a
//!   percentile is within 12.5 % of the true value), for how long the device takes to
//!   serve a data move; the fabric fills it under its lock and the snapshot carries it.
//! - [`DelayHistogram`]: fixed bounds in milliseconds, for how long guests take to zero
//!   a DMB after a close (`scripts/check_e2e.py` reads the bounds).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Counts in a fixed set of buckets and their total.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Buckets {
    counts: Box<[u64]>,
    count: u64,
}

impl Buckets {
    fn new(len: usize) -> Self {
        Self {
            counts: vec![0; len].into_boxed_slice(),
            count: 0,
        }
    }

    fn add(&mut self, bucket: usize) {
        self.counts[bucket] += 1;
        self.count += 1;
    }

    /// The bucket holding the sample of rank `rank` (1 = the smallest), if any.
    fn bucket_of_rank(&self, rank: u64) -> Option<usize> {
        let mut seen = 0u64;
        for (i, &n) in self.counts.iter().enumerate() {
            seen = seen.saturating_add(n);
            if seen >= rank {
                return Some(i);
            }
        }
        None
    }
}

/// Sub-buckets per power of two.
const SUB_BITS: u32 = 3;
const SUB: u64 = 1 << SUB_BITS;
/// Enough for 2^40 ns (18 minutes); longer samples land in the last bucket.
const BUCKETS: usize = 41 * SUB as usize;

/// Service times of one function's moves, in nanoseconds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "SparseTimes", from = "SparseTimes")]
pub struct ServiceTimes {
    buckets: Buckets,
    sum_ns: u64,
}

impl Default for ServiceTimes {
    fn default() -> Self {
        Self {
            buckets: Buckets::new(BUCKETS),
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
        self.buckets.add(bucket(ns));
        self.sum_ns = self.sum_ns.saturating_add(ns);
    }

    pub fn count(&self) -> u64 {
        self.buckets.count
    }

    pub fn sum_ns(&self) -> u64 {
        self.sum_ns
    }

    /// The `q`-quantile (0 < q <= 1) as the lowest value of its bucket, in ns (as the
    /// JSON form's buckets and `scripts/bench_guests.py` give it: at most 12.5 % low);
    /// `None` without samples.
    pub fn quantile_ns(&self, q: f64) -> Option<u64> {
        let count = self.buckets.count;
        if count == 0 {
            return None;
        }
        let rank = ((q * count as f64).ceil() as u64).clamp(1, count);
        self.buckets.bucket_of_rank(rank).map(lower_bound)
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
            .buckets
            .counts
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(i, &n)| [lower_bound(i), n])
            .collect();
        Self {
            count: t.buckets.count,
            sum_ns: t.sum_ns,
            buckets,
        }
    }
}

impl From<SparseTimes> for ServiceTimes {
    fn from(s: SparseTimes) -> Self {
        let mut t = ServiceTimes {
            sum_ns: s.sum_ns,
            ..Default::default()
        };
        t.buckets.count = s.count;
        for [lower, n] in s.buckets {
            let i = bucket(lower);
            t.buckets.counts[i] = t.buckets.counts[i].saturating_add(n);
        }
        t
    }
}

/// Upper bounds (inclusive) of the zeroing-delay histogram's buckets, in ms. 750 ms is
/// the release window `scripts/check_e2e.py` checks.
pub const DELAY_BOUNDS_MS: [f64; 14] = [
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 750.0, 1000.0, 2000.0, 5000.0, 10000.0,
];

/// Delays in fixed buckets: `counts[i]` delays were at most `le_ms[i]` and above
/// `le_ms[i - 1]`; `over` were above the last bound. The bounds are those of the file a
/// histogram was read from, [`DELAY_BOUNDS_MS`] for a new one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(into = "DelayForm", from = "DelayForm")]
pub struct DelayHistogram {
    le_ms: Vec<f64>,
    /// One bucket per bound, then the one above the last.
    buckets: Buckets,
    pub max_ms: Option<f64>,
}

impl Default for DelayHistogram {
    fn default() -> Self {
        Self {
            le_ms: DELAY_BOUNDS_MS.to_vec(),
            buckets: Buckets::new(DELAY_BOUNDS_MS.len() + 1),
            max_ms: None,
        }
    }
}

impl DelayHistogram {
    pub fn record(&mut self, ms: f64) {
        let i = self.le_ms.iter().position(|&le| ms <= le);
        self.buckets.add(i.unwrap_or(self.le_ms.len()));
        self.max_ms = Some(self.max_ms.map_or(ms, |max| max.max(ms)));
    }

    pub fn count(&self) -> u64 {
        self.buckets.count
    }

    /// Delays above the last bound.
    pub fn over(&self) -> u64 {
        self.buckets.counts[self.le_ms.len()]
    }

    /// How many delays were at most `ms` (exact when `ms` is a bucket bound).
    pub fn at_most(&self, ms: f64) -> u64 {
        self.le_ms
            .iter()
            .zip(self.buckets.counts.iter())
            .filter(|(&le, _)| le <= ms)
            .map(|(_, &n)| n)
            .sum()
    }

    /// The bound of the bucket holding the median, or None with no delays (or the
    /// median above every bound).
    pub fn median_at_most(&self) -> Option<f64> {
        if self.buckets.count == 0 {
            return None;
        }
        let i = self
            .buckets
            .bucket_of_rank(self.buckets.count.div_ceil(2))?;
        self.le_ms.get(i).copied()
    }
}

/// The JSON form (docs/observer.md): bounds, a count per bound, the rest.
#[derive(Serialize, Deserialize)]
struct DelayForm {
    le_ms: Vec<f64>,
    counts: Vec<u64>,
    over: u64,
    count: u64,
    max_ms: Option<f64>,
}

impl From<DelayHistogram> for DelayForm {
    fn from(h: DelayHistogram) -> Self {
        let (over, counts) = h.buckets.counts.split_last().unwrap_or((&0, &[]));
        Self {
            counts: counts.to_vec(),
            over: *over,
            count: h.buckets.count,
            le_ms: h.le_ms,
            max_ms: h.max_ms,
        }
    }
}

impl From<DelayForm> for DelayHistogram {
    fn from(form: DelayForm) -> Self {
        // A count per bound, whatever the file held, so that `record` cannot index past.
        let mut counts = form.counts;
        counts.resize(form.le_ms.len(), 0);
        counts.push(form.over);
        Self {
            le_ms: form.le_ms,
            buckets: Buckets {
                counts: counts.into_boxed_slice(),
                count: form.count,
            },
            max_ms: form.max_ms,
        }
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

    #[test]
    fn the_delay_histogram_counts_in_fixed_buckets() {
        let mut h = DelayHistogram::default();
        for ms in [0.5, 3.0, 4.0, 750.0, 751.0, 20000.0] {
            h.record(ms);
        }
        assert_eq!(h.count(), 6);
        assert_eq!(h.at_most(750.0), 4);
        assert_eq!(h.over(), 1);
        assert_eq!(h.max_ms, Some(20000.0));
        assert_eq!(h.median_at_most(), Some(5.0));
        let form = DelayForm::from(h);
        assert_eq!(form.counts.len(), DELAY_BOUNDS_MS.len(), "never grows");
    }

    #[test]
    fn the_delay_histograms_json_keeps_its_shape() {
        let mut h = DelayHistogram::default();
        h.record(3.0);
        h.record(99999.0);
        let json = serde_json::to_string(&h).unwrap();
        assert_eq!(
            json,
            r#"{"le_ms":[1.0,2.0,5.0,10.0,20.0,50.0,100.0,200.0,500.0,750.0,1000.0,2000.0,5000.0,10000.0],"counts":[0,0,1,0,0,0,0,0,0,0,0,0,0,0],"over":1,"count":2,"max_ms":99999.0}"#
        );
        let back: DelayHistogram = serde_json::from_str(&json).unwrap();
        assert_eq!(back, h);
        let empty = r#"{"le_ms":[],"counts":[],"over":0,"count":0,"max_ms":null}"#;
        let read: DelayHistogram = serde_json::from_str(empty).unwrap();
        assert_eq!(serde_json::to_string(&read).unwrap(), empty);
        assert_eq!(read.median_at_most(), None);
    }
}
