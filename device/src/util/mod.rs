//! Small helpers every layer may use and that know nothing of ISM: hex, histograms, JSON
//! fields in hex, rate limits, the line-writer thread.

pub mod hex;
pub mod histogram;
pub mod json;
pub mod line_writer;
pub mod ratelimit;
