//! Strata common types shared by every crate: the clock through which all time flows,
//! where blocking work runs (`exec`, the seam a deterministic simulation turns), id
//! formatting for object names, the coarse error kind that services map to HTTP/gRPC
//! statuses, and the process-wide settings every binary applies at start (`process`).
//!
//! Limits: this crate has no I/O; it must stay small so every crate can depend on it.

pub mod clock;
pub mod error;
pub mod exec;
pub mod ids;
pub mod process;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::ErrorKind;
