//! Strata common types shared by every crate: the clock through which all time flows,
//! where blocking work runs (`exec`, the seam a deterministic simulation turns), id
//! formatting for object names, and the coarse error kind that services map to HTTP/gRPC
//! statuses.
//!
//! Limits: this crate has no I/O; it must stay small so every crate can depend on it.

pub mod clock;
pub mod error;
pub mod exec;
pub mod ids;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::ErrorKind;
