//! What the tests, benches and fuzz runs share, and nothing the product ships: a
//! dev-dependency of the other crates only.
//!
//! - [`pods`]: pods, CloneSets and ControllerRevisions built from JSON;
//! - [`containerd`]: a stand-alone containerd and registry, and registry fakes;
//! - [`freezable_proxy`]: a proxy that cuts a component off the API server, at once or
//!   the moment a chosen request is in flight;
//! - [`bed`]: the test bed's kubeconfig, kubectl, images and client;
//! - [`logs`]: the log lines a piece of work writes.

pub mod bed;
pub mod containerd;
pub mod freezable_proxy;
pub mod logs;
pub mod pods;
