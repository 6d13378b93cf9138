//! Resize through CRI UpdateContainerResources against a real containerd 1.6 (cgroup v1).
//!
//! Needs root and Debian's containerd, runc, docker-registry, skopeo, busybox-static, jq.
//! Run: cargo test -p inplace-daemon --test resize_containerd -- --ignored
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use inplace_daemon::cri::CriClient;
use inplace_daemon::resize::{self, Limits, Source};
use inplace_testkit::containerd::{Fixture, free_port, remove_sandbox, run_app};

/// Host process: a fixture containerd of its own (testkit/src/containerd.rs), not on the bed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root + containerd/docker-registry/skopeo (testkit/src/containerd.rs)"]
async fn host_resize_through_cri_changes_the_cgroup_v1_limits() {
    let fx = Fixture::start().unwrap();
    let cri = CriClient::new(&fx.socket, Duration::from_secs(30)).unwrap();
    let image = format!("{}/inplace-test/app:v1", fx.registry);
    cri.pull_image(&image, None, None, Duration::from_secs(60))
        .await
        .unwrap();
    let (sb, id) = run_app(
        &cri,
        &fx.cgroup_parent,
        "resize",
        &image,
        free_port().unwrap(),
    )
    .await
    .unwrap();

    let want = Limits {
        cpu_quota: Some(50_000),
        cpu_shares: Some(256),
        memory_limit: Some(64 << 20),
    };
    let report = resize::apply(&cri, &id, &want).await.unwrap();
    println!("{report}");
    assert!(report.mismatches.is_empty(), "{report}");
    assert_ne!(
        report.before.cpu_quota, want.cpu_quota,
        "the test must change something"
    );
    assert_ne!(report.before.memory_limit, want.memory_limit);
    // read the files again ourselves
    let Source::Cgroup(mem_dir) = &report.source else {
        panic!("expected the limits to be read from the cgroup v1 files");
    };
    let read = |p: std::path::PathBuf| std::fs::read_to_string(p).unwrap().trim().to_string();
    assert_eq!(
        read(mem_dir.join("memory.limit_in_bytes")),
        (64u64 << 20).to_string()
    );
    let cpu_dir =
        std::path::PathBuf::from(mem_dir.to_string_lossy().replacen("/memory/", "/cpu/", 1));
    assert_eq!(read(cpu_dir.join("cpu.cfs_quota_us")), "50000");
    assert!(
        report
            .to_string()
            .contains("memory.limit_in_bytes=67108864")
    );
    assert!(report.to_string().ends_with("applied"));

    // a second resize down, memory only
    let smaller = Limits {
        memory_limit: Some(32 << 20),
        ..Default::default()
    };
    let r2 = resize::apply(&cri, &id, &smaller).await.unwrap();
    println!("{r2}");
    assert!(r2.mismatches.is_empty(), "{r2}");
    assert_eq!(
        r2.after.cpu_quota,
        Some(50_000),
        "unset fields keep their value"
    );
    remove_sandbox(&cri, &sb).await.unwrap();
}
