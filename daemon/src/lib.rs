//! The inplace node daemon: image pre-download, in-place update completion, container
//! recreate requests, over CRI.

pub mod api;
pub mod apiserver;
pub mod containerd_events;
pub mod cri;
pub mod crr;
pub mod inplace;
pub mod kube_io;
pub mod logging;
pub mod metrics;
pub mod pod_cache;
pub mod puller;
pub mod recorder;
pub mod resize;
pub mod server;
