//! Offline converters that only the command line runs: the event stream to a timeline
//! ([`timeline`]) in the Chrome trace-event format ([`chrome_trace`]). Nothing here runs
//! in the device.

pub mod chrome_trace;
pub mod timeline;
