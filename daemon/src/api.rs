//! The resource types the daemon reads and writes, from `inplace-proto`.

pub use inplace_proto::nodeimage::{
    ImagePullPhase as TagPhase, ImageSpec, ImageStatus, ImageTagPullPolicy, ImageTagSpec,
    ImageTagStatus, NodeImage, NodeImageSpec, NodeImageStatus, ReferenceObject, SandboxConfig,
};
pub use inplace_proto::{
    ContainerRecreateRequest, ContainerRecreateRequestContainer,
    ContainerRecreateRequestContainerRecreateState, ContainerRecreateRequestSpec,
    ContainerRecreateRequestStatus, CrrFailurePolicy, CrrPhase, CrrSyncContainerStatus,
    ImagePullPolicy, ProbeHandler,
};
