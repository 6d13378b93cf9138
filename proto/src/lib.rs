//! The contract between the inplace controller and daemon: the `apps.kruise.io` resource
//! types (at the versions OpenKruise v1.9.0 stores), the well-known keys, the in-place
//! update state, and the CRDs generated from the types ([`crdgen`], with the validation of
//! [`validation`]). No I/O.

pub mod cloneset;
pub mod crdgen;
pub mod crr;
pub mod defaults;
pub mod downward;
pub mod image_ref;
pub mod imagelistpulljob;
pub mod imagepulljob;
pub mod inplace_contract;
pub mod inplace_state;
pub mod keys;
pub mod logging;
pub mod monitoring;
pub mod nodeimage;
pub mod process_metrics;
pub mod quantity;
pub mod request_timeout;
pub mod template;
pub mod validation;

pub use cloneset::*;
pub use crr::*;
pub use imagelistpulljob::{
    FailedImageStatus, ImageListPullJob, ImageListPullJobSpec, ImageListPullJobStatus,
};
pub use imagepulljob::*;
pub use inplace_state::*;
pub use nodeimage::{
    ImagePullPhase, ImageSpec, ImageStatus, ImageTagPullPolicy, ImageTagSpec, ImageTagStatus,
    NodeImage, NodeImageSpec, NodeImageStatus, ReferenceObject, SyncStatus, SyncStatusPhase,
};
pub use template::{ClaimTemplate, PodTemplate, RawObject};
