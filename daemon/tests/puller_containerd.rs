//! Image puller against a real containerd 1.6 and a local registry.
//!
//! Needs root and Debian's containerd, runc, docker-registry, skopeo, busybox-static, jq.
//! Run: cargo test -p inplace-daemon --test puller_containerd -- --ignored --test-threads=1
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use inplace_daemon::api::{
    ImageSpec, ImageTagPullPolicy, ImageTagSpec, ImageTagStatus, NodeImageSpec, NodeImageStatus,
    TagPhase,
};
use inplace_daemon::cri::CriClient;
use inplace_daemon::metrics::Metrics;
use inplace_daemon::puller::{Puller, PullerConfig, Snapshot, no_secrets};
use inplace_testkit::containerd::{BlackHole, Fixture, SlowProxy, free_port};
use tokio::sync::watch;

const NEEDS: &str = "needs root + containerd/docker-registry/skopeo (testkit/src/containerd.rs)";

fn tag(t: &str, timeout: i32, backoff: i32) -> ImageTagSpec {
    ImageTagSpec {
        tag: t.into(),
        pull_policy: Some(ImageTagPullPolicy {
            timeout_seconds: Some(timeout),
            backoff_limit: Some(backoff),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn spec(entries: Vec<(String, Vec<ImageTagSpec>)>) -> NodeImageSpec {
    NodeImageSpec {
        images: entries
            .into_iter()
            .map(|(n, tags)| {
                (
                    n,
                    ImageSpec {
                        tags,
                        ..Default::default()
                    },
                )
            })
            .collect(),
    }
}

struct Run {
    snap_tx: watch::Sender<Option<Snapshot>>,
    status_rx: watch::Receiver<NodeImageStatus>,
    task: tokio::task::JoinHandle<()>,
}

fn start_puller(fx: &Fixture, max: usize, s: NodeImageSpec) -> Run {
    start_puller_with(
        fx,
        PullerConfig {
            max_concurrent: max,
            stall_window: None,
        },
        s,
    )
}

fn start_puller_with(fx: &Fixture, config: PullerConfig, s: NodeImageSpec) -> Run {
    let cri = CriClient::new(&fx.socket, Duration::from_secs(10)).unwrap();
    let (puller, status_rx) = Puller::new(cri, config, no_secrets(), Metrics::unregistered());
    let (snap_tx, snap_rx) = watch::channel(Some(Snapshot {
        spec: s,
        status: NodeImageStatus::default(),
        resource_version: None,
    }));
    let task = tokio::spawn(puller.run(snap_rx));
    Run {
        snap_tx,
        status_rx,
        task,
    }
}

async fn wait_done(run: &mut Run, limit: Duration) -> NodeImageStatus {
    wait_for(run, limit, |_| true).await
}

async fn wait_for(
    run: &mut Run,
    limit: Duration,
    also: impl Fn(&NodeImageStatus) -> bool,
) -> NodeImageStatus {
    let t0 = Instant::now();
    loop {
        {
            let s = run.status_rx.borrow_and_update().clone();
            if s.desired > 0 && s.succeeded + s.failed == s.desired && also(&s) {
                return s;
            }
        }
        let left = limit.saturating_sub(t0.elapsed());
        assert!(
            !left.is_zero(),
            "not finished within {limit:?}: {:#?}",
            *run.status_rx.borrow()
        );
        let _ = tokio::time::timeout(left, run.status_rx.changed()).await;
    }
}

fn the_tag(s: &NodeImageStatus, image: &str) -> ImageTagStatus {
    s.image_statuses[image].tags[0].clone()
}

/// Host process: the puller on a fixture containerd and registry of its own
/// (testkit/src/containerd.rs), not on the bed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root + containerd/docker-registry/skopeo (testkit/src/containerd.rs)"]
async fn host_k_images_at_parallelism_p_never_exceed_p() {
    let _ = NEEDS;
    let fx = Fixture::start().unwrap();
    let images = fx.push_bulk("bulk", 6, 256).unwrap();
    let proxy = SlowProxy::start(&fx.registry, Duration::from_millis(400))
        .await
        .unwrap();
    fx.allow_http(&proxy.addr).unwrap();
    let names: Vec<String> = images
        .iter()
        .map(|r| {
            r.replace(&fx.registry, &proxy.addr)
                .trim_end_matches(":v1")
                .to_string()
        })
        .collect();
    let p = 2;
    let t0 = Instant::now();
    let mut run = start_puller(
        &fx,
        p,
        spec(
            names
                .iter()
                .map(|n| (n.clone(), vec![tag("v1", 60, 1)]))
                .collect(),
        ),
    );
    let s = wait_done(&mut run, Duration::from_secs(120)).await;
    assert_eq!((s.desired, s.succeeded, s.failed), (6, 6, 0), "{s:#?}");
    let max = proxy.max_concurrent_repos();
    println!(
        "6 images at parallelism {p}: {:.2}s, max concurrent repositories at the registry = {max}, repos seen {}",
        t0.elapsed().as_secs_f64(),
        proxy.repos_seen().len()
    );
    assert_eq!(proxy.repos_seen().len(), 6);
    assert!(max <= p, "saw {max} concurrent pulls with a cap of {p}");
    assert_eq!(
        max, p,
        "the cap was never reached: the measurement would prove nothing"
    );
    for n in &names {
        let t = the_tag(&s, n);
        assert!(t.image_id.starts_with(&format!("{n}@sha256:")), "{t:?}");
        assert_eq!(t.progress, 100);
        assert!(t.start_time.is_some() && t.completion_time.is_some());
    }
    run.task.abort();
}

/// Host process: the puller on a fixture containerd and registry of its own
/// (testkit/src/containerd.rs), not on the bed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root + containerd/docker-registry/skopeo (testkit/src/containerd.rs)"]
async fn host_failures_land_in_status_with_the_runtime_message() {
    let fx = Fixture::start().unwrap();
    let hole = BlackHole::start().await.unwrap();
    fx.allow_http(&hole.addr).unwrap();
    // A port nothing listens on. Seen once: the port freed by free_port() was the black
    // hole's own (both on 127.0.0.1), so the "dead" registry timed out instead of refusing.
    let dead = loop {
        let candidate = format!("127.0.0.1:{}", free_port().unwrap());
        if candidate != hole.addr {
            break candidate;
        }
    };
    fx.allow_http(&dead).unwrap();
    let missing = format!("{}/inplace-test/app", fx.registry);
    let good = format!("{}/inplace-test/pause", fx.registry);
    let entries = vec![
        (missing.clone(), vec![tag("nope", 20, 1)]),
        (format!("{dead}/x/y"), vec![tag("v1", 20, 2)]),
        (format!("{}/x/y", hole.addr), vec![tag("v1", 3, 1)]),
        (format!("{}/Bad Name", fx.registry), vec![tag("v1", 20, 3)]),
        (good.clone(), vec![tag("1", 60, 0)]),
    ];
    let t0 = Instant::now();
    let mut run = start_puller(&fx, 4, spec(entries));
    let s = wait_done(&mut run, Duration::from_secs(60)).await;
    let took = t0.elapsed();
    println!("{}", serde_json::to_string_pretty(&s).unwrap());
    assert_eq!((s.desired, s.succeeded, s.failed), (5, 1, 4));

    let m = the_tag(&s, &missing);
    assert_eq!(m.phase, TagPhase::Failed);
    assert!(m.message.starts_with("NotFound: "), "{}", m.message);
    assert!(m.message.contains("not found"), "{}", m.message);
    assert!(m.message.ends_with("(after 2 attempt(s))"), "{}", m.message);

    let d = the_tag(&s, &format!("{dead}/x/y"));
    assert!(d.message.contains("connection refused"), "{}", d.message);
    assert!(d.message.ends_with("(after 3 attempt(s))"), "{}", d.message);

    let h = the_tag(&s, &format!("{}/x/y", hole.addr));
    assert!(
        h.message
            .contains("PullImage: no answer from the runtime within 3s"),
        "{}",
        h.message
    );
    assert!(h.message.ends_with("(after 2 attempt(s))"), "{}", h.message);
    // 2 attempts of 3 s + 1 s backoff, with slack
    assert!(took < Duration::from_secs(20), "took {took:?}");

    let b = the_tag(&s, &format!("{}/Bad Name", fx.registry));
    assert!(
        b.message.starts_with("invalid image reference"),
        "{}",
        b.message
    );

    let g = the_tag(&s, &good);
    assert_eq!(g.phase, TagPhase::Succeeded);

    // IfNotPresent short-circuits: re-adding the present image as a new version
    // succeeds without a pull
    let mut sp = spec(vec![(good.clone(), vec![tag("1", 60, 0)])]);
    sp.images.get_mut(&good).unwrap().tags[0].version = 1;
    run.snap_tx
        .send(Some(Snapshot {
            spec: sp,
            status: s.clone(),
            resource_version: None,
        }))
        .unwrap();
    let t1 = Instant::now();
    let s2 = wait_for(&mut run, Duration::from_secs(10), |s| s.desired == 1).await;
    assert_eq!((s2.desired, s2.succeeded), (1, 1));
    assert_eq!(the_tag(&s2, &good).version, 1);
    assert!(t1.elapsed() < Duration::from_secs(2));
    run.task.abort();
}

/// A registry that accepts connections and never answers holds a pull slot only for the
/// stall window, not for the attempt's timeout: with one slot, a pull from the good
/// registry queued behind the stalled one completes once the window has passed, the
/// stalled attempt counts as failed with the reason, and the retry stalls again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root + containerd/docker-registry/skopeo (testkit/src/containerd.rs)"]
async fn a_stalled_registry_frees_its_pull_slot_within_the_stall_window() {
    let fx = Fixture::start().unwrap();
    let hole = BlackHole::start().await.unwrap();
    fx.allow_http(&hole.addr).unwrap();
    let window = Duration::from_secs(5);
    let slack = Duration::from_secs(4);
    let stalled = format!("{}/x/y", hole.addr);
    let good = format!("{}/inplace-test/app", fx.registry);
    // 600 s per attempt, as the reference's default; two attempts
    let mut run = start_puller_with(
        &fx,
        PullerConfig {
            max_concurrent: 1,
            stall_window: Some(window),
        },
        spec(vec![(stalled.clone(), vec![tag("v1", 600, 1)])]),
    );
    let t0 = Instant::now();
    wait_for_tag(&mut run, &stalled, Duration::from_secs(10), |t| {
        t.phase == TagPhase::Pulling
    })
    .await;
    // the good image is queued behind the stalled pull (one slot)
    run.snap_tx
        .send(Some(Snapshot {
            spec: spec(vec![
                (stalled.clone(), vec![tag("v1", 600, 1)]),
                (good.clone(), vec![tag("v1", 60, 0)]),
            ]),
            status: NodeImageStatus::default(),
            resource_version: None,
        }))
        .unwrap();
    let g = wait_for_tag(
        &mut run,
        &good,
        window + slack + Duration::from_secs(10),
        |t| t.phase.is_finished(),
    )
    .await;
    let good_done = t0.elapsed();
    assert_eq!(g.phase, TagPhase::Succeeded, "{g:?}");
    println!("good image pulled after {good_done:?} (stall window {window:?})");
    assert!(good_done >= window, "{good_done:?}");
    assert!(
        good_done < window + slack + Duration::from_secs(5),
        "{good_done:?}"
    );
    let h = the_tag(&run.status_rx.borrow(), &stalled);
    assert_eq!(h.phase, TagPhase::Pulling, "retry still under way: {h:?}");
    let want = format!(
        "attempt 1: no progress for 5s from registry {}; retrying",
        hole.addr
    );
    assert_eq!(h.message, want);

    let h = wait_for_tag(&mut run, &stalled, 2 * (window + slack), |t| {
        t.phase.is_finished()
    })
    .await;
    let stalled_done = t0.elapsed();
    println!("stalled image failed after {stalled_done:?}: {}", h.message);
    assert_eq!(h.phase, TagPhase::Failed);
    assert_eq!(
        h.message,
        format!(
            "no progress for 5s from registry {} (after 2 attempt(s))",
            hole.addr
        )
    );
    // two windows and the 1 s backoff, far below one 600 s attempt
    assert!(stalled_done < 2 * (window + slack), "{stalled_done:?}");
    run.task.abort();
}

async fn wait_for_tag(
    run: &mut Run,
    image: &str,
    limit: Duration,
    ok: impl Fn(&ImageTagStatus) -> bool,
) -> ImageTagStatus {
    let t0 = Instant::now();
    loop {
        if let Some(t) = run
            .status_rx
            .borrow_and_update()
            .image_statuses
            .get(image)
            .and_then(|i| i.tags.first())
            .filter(|t| ok(t))
        {
            return t.clone();
        }
        let left = limit.saturating_sub(t0.elapsed());
        assert!(
            !left.is_zero(),
            "{image} not as expected within {limit:?}: {:#?}",
            *run.status_rx.borrow()
        );
        let _ = tokio::time::timeout(left, run.status_rx.changed()).await;
    }
}

/// Writes an executable shell script.
fn write_script(path: &std::path::Path, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A registry that wants a login (htpasswd): with no credentials the pull fails
/// (unauthorized); a pull secret's entry for it and the answer of a credential provider
/// plugin (a script written here) each log the pull in, on containerd's CRI, which only
/// uses credentials whose `server_address` is empty or the URL of the host it contacts.
///
/// Host process: the puller on a fixture containerd and registries of its own
/// (testkit/src/containerd.rs), not on the bed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs root + containerd/docker-registry/skopeo (testkit/src/containerd.rs)"]
async fn host_a_login_registry_is_pulled_from_with_a_pull_secret_or_a_credential_provider() {
    use inplace_daemon::api::ReferenceObject;
    use inplace_daemon::puller::SecretFetcher;
    use inplace_daemon::puller::provider::parse_config;
    use inplace_daemon::puller::provider_exec::CredentialProviders;
    use std::collections::BTreeMap;
    use std::sync::Arc;

    let mut fx = Fixture::start().unwrap();
    let password = format!("pw-{:08x}", rand::random::<u32>());
    let reg = fx.start_auth_registry("puller", &password).unwrap();
    let image = format!("{reg}/inplace-test/app");
    let plugins = tempfile::tempdir().unwrap();
    write_script(
        &plugins.path().join("login"),
        &format!(
            r#"cat >/dev/null
printf '{{"apiVersion":"credentialprovider.kubelet.k8s.io/v1","kind":"CredentialProviderResponse","cacheKeyType":"Image","auth":{{"{reg}":{{"username":"puller","password":"{password}"}}}}}}'"#
        ),
    );
    let providers = CredentialProviders::new(
        parse_config(&format!(
            "apiVersion: kubelet.config.k8s.io/v1\nkind: CredentialProviderConfig\nproviders:\n  - name: login\n    matchImages: [\"{reg}\"]\n    defaultCacheDuration: 0s\n    apiVersion: credentialprovider.kubelet.k8s.io/v1\n"
        ))
        .unwrap(),
        plugins.path(),
        Duration::from_secs(10),
    )
    .unwrap();
    let providers = Arc::new(providers);
    let docker_config =
        format!(r#"{{"auths":{{"{reg}":{{"username":"puller","password":"{password}"}}}}}}"#);
    let secrets: SecretFetcher = Arc::new(move |ns, name| {
        let data = (ns == "inplace-system" && name == "login").then(|| {
            BTreeMap::from([(
                ".dockerconfigjson".to_string(),
                docker_config.clone().into_bytes(),
            )])
        });
        Box::pin(async move { Ok(data) })
    });

    // (case, with the secret, with the providers, tag, succeeds)
    for (case, secret, with_providers, t, ok) in [
        ("anonymous", false, false, "v1", false),
        ("pull secret", true, false, "v1", true),
        ("credential provider", false, true, "v2", true),
    ] {
        let cri = CriClient::new(&fx.socket, Duration::from_secs(10)).unwrap();
        let fetch = if secret {
            secrets.clone()
        } else {
            no_secrets()
        };
        let (mut puller, status_rx) = Puller::new(
            cri,
            PullerConfig {
                max_concurrent: 1,
                stall_window: None,
            },
            fetch,
            Metrics::unregistered(),
        );
        if with_providers {
            puller = puller.with_credential_providers(providers.clone());
        }
        let mut s = spec(vec![(image.clone(), vec![tag(t, 30, 0)])]);
        if secret {
            s.images.get_mut(&image).unwrap().pull_secrets = vec![ReferenceObject {
                namespace: "inplace-system".into(),
                name: "login".into(),
                ..Default::default()
            }];
        }
        let (snap_tx, snap_rx) = watch::channel(Some(Snapshot {
            spec: s,
            status: NodeImageStatus::default(),
            resource_version: None,
        }));
        let mut run = Run {
            snap_tx,
            status_rx,
            task: tokio::spawn(puller.run(snap_rx)),
        };
        let st = wait_done(&mut run, Duration::from_secs(60)).await;
        let got = the_tag(&st, &image);
        println!("{case}: {:?} {:?}", got.phase, got.message);
        if ok {
            assert_eq!(got.phase, TagPhase::Succeeded, "{case}: {}", got.message);
        } else {
            assert_eq!(got.phase, TagPhase::Failed, "{case}");
            assert!(
                got.message.to_lowercase().contains("unauthorized"),
                "{case}: {}",
                got.message
            );
        }
        run.task.abort();
    }
}
