//! The contract between the inplace controller and daemon: the `apps.kruise.io/v1alpha1`
//! resource types, the well-known keys, and the in-place update state. No I/O.

pub mod cloneset;
pub mod inplace_state;
pub mod keys;
pub mod template;

pub use cloneset::*;
pub use inplace_state::*;
pub use template::{ClaimTemplate, PodTemplate, RawObject};
