//! Keys, values and key choosers of the load drivers (`strata-loadtest`, `netbench`): the
//! `strata-ycsb` crate, which `slatebench` shares for the SlateDB side of a comparison.

pub use strata_ycsb::{Dist, KeyChooser, Zipf, key, value};
