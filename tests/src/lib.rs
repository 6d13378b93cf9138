//! Test bed helpers shared by the end-to-end suites.

pub mod bed;
pub mod benchcalc;
pub mod faults;
pub mod nodesim;
