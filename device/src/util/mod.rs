//! Small helpers every layer may use and that know nothing of ISM: hex, rate limits.

pub mod hex;
pub mod ratelimit;
