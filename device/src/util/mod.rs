//! Small helpers every layer may use and that know nothing of ISM: hex, histograms, rate
//! limits.

pub mod hex;
pub mod histogram;
pub mod ratelimit;
