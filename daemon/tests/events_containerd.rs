//! The containerd event stream against a real containerd 1.6, across a containerd restart.
//!
//! Needs root and Debian's containerd, runc, docker-registry, skopeo, busybox-static, jq.
//! Run: cargo test -p inplace-daemon --test events_containerd -- --ignored
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use inplace_daemon::containerd_events;
use inplace_daemon::cri::CriClient;
use inplace_testkit::containerd::{Fixture, free_port, remove_sandbox, run_app};
use tokio::sync::Notify;

async fn wait_topic(seen: &Arc<Mutex<Vec<String>>>, topic: &str, limit: Duration) {
    let t0 = std::time::Instant::now();
    while t0.elapsed() < limit {
        if seen.lock().unwrap().iter().any(|t| t == topic) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "no {topic} event within {limit:?}; saw {:?}",
        seen.lock().unwrap()
    );
}

/// Host process: restarts a fixture containerd of its own (testkit/src/containerd.rs), not on
/// the bed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root + containerd/docker-registry/skopeo (testkit/src/containerd.rs)"]
async fn host_task_events_wake_and_survive_a_containerd_restart() {
    let mut fx = Fixture::start().unwrap();
    let cri = CriClient::new(&fx.socket, Duration::from_secs(30)).unwrap();
    let image = format!("{}/inplace-test/app:v1", fx.registry);
    let notify = Arc::new(Notify::new());
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let s2 = seen.clone();
    let follower = tokio::spawn(containerd_events::follow(
        fx.socket.clone(),
        vec![notify.clone()],
        move |t| {
            s2.lock().unwrap().push(t.to_string());
        },
    ));
    tokio::time::sleep(Duration::from_millis(500)).await;
    cri.pull_image(&image, None, None, Duration::from_secs(60))
        .await
        .unwrap();
    wait_topic(&seen, "/images/create", Duration::from_secs(5)).await;
    let (sb, _) = run_app(&cri, &fx.cgroup_parent, "ev1", &image, free_port().unwrap())
        .await
        .unwrap();
    wait_topic(&seen, "/tasks/start", Duration::from_secs(5)).await;
    tokio::time::timeout(Duration::from_secs(1), notify.notified())
        .await
        .unwrap();
    remove_sandbox(&cri, &sb).await.unwrap();
    wait_topic(&seen, "/tasks/exit", Duration::from_secs(5)).await;

    fx.restart_containerd().unwrap();
    seen.lock().unwrap().clear();
    // re-subscription backs off at most a few seconds
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cri = CriClient::new(&fx.socket, Duration::from_secs(30)).unwrap();
    let (sb, _) = run_app(&cri, &fx.cgroup_parent, "ev2", &image, free_port().unwrap())
        .await
        .unwrap();
    wait_topic(&seen, "/tasks/start", Duration::from_secs(10)).await;
    remove_sandbox(&cri, &sb).await.unwrap();
    follower.abort();
}
