//! Leader election on a `coordination.k8s.io/v1` Lease.
//!
//! Only the holder of the lease reconciles. A replica that loses the lease after having
//! held it exits (its caches and expectations belong to a term that is over); the
//! Deployment restarts it as a follower.

use std::time::Duration;

use kube::Client;
use kube_lease_manager::{LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;

/// Lease settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    /// How long a lease is valid after its last renewal.
    pub duration: Duration,
    /// How long before expiry the holder renews.
    pub grace: Duration,
}

/// A running election.
#[derive(Debug)]
pub struct Election {
    rx: watch::Receiver<bool>,
    _task: tokio::task::JoinHandle<Result<kube_lease_manager::LeaseManager, LeaseManagerError>>,
}

impl Election {
    /// Joins the election (creates the Lease if needed).
    pub async fn start(client: Client, config: &LeaseConfig) -> Result<Self, LeaseManagerError> {
        let manager = LeaseManagerBuilder::new(client, config.name.clone())
            .with_namespace(config.namespace.clone())
            .with_identity(config.identity.clone())
            .with_duration(config.duration.as_secs().max(2))
            .with_grace(config.grace.as_secs().max(1))
            .build()
            .await?;
        let (rx, task) = manager.watch().await;
        Ok(Self { rx, _task: task })
    }

    /// Whether this instance holds the lease now.
    pub fn is_leader(&self) -> bool {
        *self.rx.borrow()
    }

    /// Waits until this instance holds the lease. Errors when the election task is gone.
    pub async fn acquired(&mut self) -> Result<(), watch::error::RecvError> {
        while !*self.rx.borrow_and_update() {
            self.rx.changed().await?;
        }
        Ok(())
    }

    /// Waits until the lease is lost (or the election task is gone).
    pub async fn lost(&mut self) {
        loop {
            if !*self.rx.borrow_and_update() {
                return;
            }
            if self.rx.changed().await.is_err() {
                return;
            }
        }
    }
}
