//! The node simulator against the real test bed (kube-apiserver, controller-manager and
//! scheduler v1.20). Run with:
//!
//! ```text
//! tests/testbed/up
//! INPLACE_TESTBED_KUBECONFIG=/var/tmp/inplace-testbed/kubeconfig \
//!   cargo test -p inplace-tests --test nodesim -- --ignored --nocapture
//! ```

use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use inplace_tests::bed::{
    self, client, delete_namespace_and_wait, namespace, pod, pod_condition, pod_ready, suffix,
    wait_for,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

type Sim = bed::Sim;

fn start_sim(group: &str, nodes: usize, extra: &[&str]) -> Result<Sim> {
    Sim::start(
        std::path::Path::new(env!("CARGO_BIN_EXE_inplace-nodesim")),
        group,
        nodes,
        extra,
    )
}

/// [`start_sim`], once its nodes are Ready, and the namespace `group` for the test's pods.
async fn sim_with_namespace(
    client: &Client,
    group: &str,
    nodes: usize,
    extra: &[&str],
) -> Result<Sim> {
    let sim = start_sim(group, nodes, extra)?;
    sim.wait_nodes_ready(client, Duration::from_secs(60))
        .await?;
    namespace(client, group).await?;
    Ok(sim)
}

fn container_status(p: &Pod) -> Option<&k8s_openapi::api::core::v1::ContainerStatus> {
    p.status.as_ref()?.container_statuses.as_ref()?.first()
}

async fn get(api: &Api<Pod>, name: &str) -> Result<Pod> {
    Ok(api.get(name).await?)
}

/// Changes the image of container `app` of pod `name` (an in-place restart for a kubelet).
async fn set_image(api: &Api<Pod>, name: &str, image: &str) -> Result<()> {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Strategic(json!({ "spec": { "containers": [{ "name": "app", "image": image }] } })),
    )
    .await?;
    Ok(())
}

/// Waits until pod `name` satisfies `ok`, returns it and the time it took.
async fn wait_pod(
    api: &Api<Pod>,
    name: &str,
    timeout: Duration,
    what: &str,
    ok: impl Fn(&Pod) -> bool,
) -> Result<(Pod, Duration)> {
    let ok = &ok;
    wait_for(timeout, Duration::from_millis(100), what, || async move {
        let p = get(api, name).await?;
        Ok(ok(&p).then_some(p))
    })
    .await
}

#[tokio::test]
#[ignore = "needs the test bed (tests/testbed/up)"]
async fn thousand_pods_on_hundred_simulated_nodes_become_ready() -> Result<()> {
    let client = client().await?;
    let group = format!("nst-scale-{}", suffix());
    let mut sim = start_sim(&group, 100, &["--stats-interval", "5s"])?;
    let took = sim
        .wait_nodes_ready(&client, Duration::from_secs(120))
        .await?;
    println!("100 simulated nodes Ready in {:.1}s", took.as_secs_f64());

    let ns = group.clone();
    namespace(&client, &ns).await?;
    let result = scale_body(&client, &ns, &sim).await;
    let t0 = Instant::now();
    let gone = delete_namespace_and_wait(&client, &ns, Duration::from_secs(300)).await;
    match &gone {
        Ok(_) => println!(
            "namespace emptied of 1,000 pods in {:.1}s",
            t0.elapsed().as_secs_f64()
        ),
        Err(e) => println!("pods not all gone: {e:#}"),
    }
    sim.stop()?;
    println!(
        "simulator at exit: {}",
        sim.last_report().unwrap_or_default()
    );
    result?;
    gone?;
    Ok(())
}

async fn scale_body(client: &Client, ns: &str, sim: &Sim) -> Result<()> {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let d: Deployment = serde_json::from_value(json!({
        "metadata": { "name": "scale" },
        "spec": {
            "replicas": 1000,
            "selector": { "matchLabels": { "app": "scale" } },
            "template": {
                "metadata": { "labels": { "app": "scale" } },
                "spec": {
                    "nodeSelector": sim.selector(),
                        "tolerations": sim.tolerations(),
                    "terminationGracePeriodSeconds": 5,
                    "containers": [{ "name": "app", "image": "registry.invalid/app:v1" }],
                },
            },
        },
    }))?;
    let t0 = Instant::now();
    deployments.create(&PostParams::default(), &d).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels("app=scale");
    let mut last_print = Instant::now();
    let (list, took) = wait_for(
        Duration::from_secs(300),
        Duration::from_secs(1),
        "1,000 pods Ready",
        || {
            let (pods, lp) = (pods.clone(), lp.clone());
            let print = last_print.elapsed() > Duration::from_secs(10);
            if print {
                last_print = Instant::now();
            }
            async move {
                let list = pods.list(&lp).await?;
                let ready = list.items.iter().filter(|p| pod_ready(p)).count();
                if print {
                    println!(
                        "  {:>5.1}s: {} pods, {} Ready",
                        t0.elapsed().as_secs_f64(),
                        list.items.len(),
                        ready
                    );
                }
                Ok((ready == 1000).then_some(list))
            }
        },
    )
    .await?;
    println!(
        "1,000 pods of a Deployment Ready on 100 simulated nodes {:.1}s after the Deployment was created",
        took.as_secs_f64()
    );
    let ips: HashSet<String> = list
        .items
        .iter()
        .filter_map(|p| p.status.as_ref()?.pod_ip.clone())
        .collect();
    ensure!(
        ips.len() == 1000,
        "pod IPs must be unique, got {} distinct",
        ips.len()
    );
    let nodes: HashSet<String> = list
        .items
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    ensure!(
        nodes.iter().all(|n| n.starts_with(&sim.prefix)),
        "all pods on this simulator's nodes"
    );
    println!("spread over {} nodes", nodes.len());
    tokio::time::sleep(Duration::from_secs(6)).await;
    println!("simulator: {}", sim.last_report().unwrap_or_default());
    Ok(())
}

#[tokio::test]
#[ignore = "needs the test bed (tests/testbed/up)"]
async fn image_change_restarts_the_container_in_place() -> Result<()> {
    let client = client().await?;
    let group = format!("nst-update-{}", suffix());
    let sim = sim_with_namespace(
        &client,
        &group,
        2,
        &["--update-delay", "1s", "--ready-delay", "500ms"],
    )
    .await?;
    let result = async {
        let api: Api<Pod> = Api::namespaced(client.clone(), &group);
        api.create(&PostParams::default(), &pod("web", &sim, "reg.invalid/app:v1", json!({}))?)
            .await?;
        let (before, took) = wait_pod(&api, "web", Duration::from_secs(60), "pod Ready", pod_ready).await?;
        println!("pod Ready {:.2}s after create", took.as_secs_f64());
        let cs0 = container_status(&before).context("container status")?.clone();
        ensure!(cs0.restart_count == 0 && cs0.ready && cs0.started == Some(true));
        ensure!(cs0.container_id.as_deref().is_some_and(|id| id.starts_with("sim://")));
        ensure!(cs0.image_id.starts_with("sim-image@sha256:"));

        let t0 = Instant::now();
        set_image(&api, "web", "reg.invalid/app:v2").await?;
        let (_, saw_unready) = wait_pod(&api, "web", Duration::from_secs(30), "container not ready", |p| {
            !pod_ready(p)
        })
        .await?;
        let (after, took) = wait_pod(&api, "web", Duration::from_secs(60), "restarted and Ready", |p| {
            pod_ready(p) && container_status(p).is_some_and(|c| c.restart_count == 1)
        })
        .await?;
        let cs1 = container_status(&after).context("container status")?;
        println!(
            "image patch → not ready after {:.2}s, → restarted and Ready after {:.2}s (total {:.2}s)",
            saw_unready.as_secs_f64(),
            took.as_secs_f64(),
            t0.elapsed().as_secs_f64()
        );
        ensure!(after.metadata.uid == before.metadata.uid, "same UID");
        let ip = |p: &Pod| p.status.as_ref().and_then(|s| s.pod_ip.clone());
        ensure!(ip(&after) == ip(&before) && ip(&after).is_some(), "same pod IP");
        ensure!(cs1.image == "reg.invalid/app:v2");
        ensure!(cs1.image_id != cs0.image_id, "new imageID");
        ensure!(cs1.container_id != cs0.container_id, "new containerID");
        let last = cs1
            .last_state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .context("lastState.terminated")?;
        ensure!(last.container_id == cs0.container_id);
        Ok(())
    }
    .await;
    let cleanup = bed::delete_namespace_and_wait(&client, &group, Duration::from_secs(60)).await;
    result?;
    cleanup
}

#[tokio::test]
#[ignore = "needs the test bed (tests/testbed/up)"]
async fn readiness_gate_holds_ready_until_its_condition_is_true() -> Result<()> {
    let client = client().await?;
    let group = format!("nst-gate-{}", suffix());
    let sim = sim_with_namespace(&client, &group, 2, &[]).await?;
    let result = async {
        let api: Api<Pod> = Api::namespaced(client.clone(), &group);
        let gated = json!({ "readinessGates": [{ "conditionType": "InPlaceUpdateReady" }] });
        api.create(
            &PostParams::default(),
            &pod("gated", &sim, "reg.invalid/app:v1", gated)?,
        )
        .await?;
        wait_pod(
            &api,
            "gated",
            Duration::from_secs(60),
            "ContainersReady",
            |p| pod_condition(p, "ContainersReady").as_deref() == Some("True"),
        )
        .await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let p = get(&api, "gated").await?;
        ensure!(!pod_ready(&p), "Ready must wait for the gate's condition");
        let set_gate = |status: &'static str| {
            let api = api.clone();
            async move {
                let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
                api.patch_status(
                    "gated",
                    &PatchParams::default(),
                    &Patch::Strategic(json!({ "status": { "conditions": [{
                        "type": "InPlaceUpdateReady", "status": status, "lastTransitionTime": now,
                    }] } })),
                )
                .await
            }
        };
        set_gate("False").await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        ensure!(
            !pod_ready(&get(&api, "gated").await?),
            "gate False: not Ready"
        );
        let t0 = Instant::now();
        set_gate("True").await?;
        let (p, _) = wait_pod(
            &api,
            "gated",
            Duration::from_secs(30),
            "Ready after the gate",
            pod_ready,
        )
        .await?;
        println!(
            "Ready {:.2}s after the gate's condition turned True",
            t0.elapsed().as_secs_f64()
        );
        ensure!(pod_condition(&p, "InPlaceUpdateReady").as_deref() == Some("True"));
        ensure!(pod_condition(&p, "PodScheduled").as_deref() == Some("True"));

        // The controller's step: gate False first, then the image; the pod must drop out
        // of Ready and come back only when the gate is True again.
        set_gate("False").await?;
        wait_pod(
            &api,
            "gated",
            Duration::from_secs(30),
            "not Ready after gate False",
            |p| !pod_ready(p),
        )
        .await?;
        set_image(&api, "gated", "reg.invalid/app:v2").await?;
        let (p, _) = wait_pod(&api, "gated", Duration::from_secs(60), "restarted", |p| {
            container_status(p).is_some_and(|c| c.restart_count == 1 && c.ready)
        })
        .await?;
        ensure!(!pod_ready(&p), "still gated");
        ensure!(
            pod_condition(&p, "InPlaceUpdateReady").as_deref() == Some("False"),
            "the simulator's status writes keep others' conditions"
        );
        set_gate("True").await?;
        wait_pod(
            &api,
            "gated",
            Duration::from_secs(30),
            "Ready again",
            pod_ready,
        )
        .await?;
        Ok(())
    }
    .await;
    let cleanup = bed::delete_namespace_and_wait(&client, &group, Duration::from_secs(60)).await;
    result?;
    cleanup
}

#[tokio::test]
#[ignore = "needs the test bed (tests/testbed/up)"]
async fn faults_and_graceful_deletion() -> Result<()> {
    let client = client().await?;
    let group = format!("nst-faults-{}", suffix());
    let sim = sim_with_namespace(
        &client,
        &group,
        2,
        &[
            "--crash-backoff",
            "1s",
            "--crash-run",
            "500ms",
            "--pull-backoff-after",
            "1s",
            "--max-grace",
            "2s",
            "--stats-interval",
            "1s",
        ],
    )
    .await?;
    let result = async {
        let api: Api<Pod> = Api::namespaced(client.clone(), &group);
        let with_fault = |name: &str, fault: &str| -> Result<Pod> {
            let mut p = pod(name, &sim, "reg.invalid/app:v1", json!({}))?;
            p.metadata.annotations =
                Some([("sim.inplace.dev/fault".to_owned(), fault.to_owned())].into());
            Ok(p)
        };
        let pp = PostParams::default();
        api.create(&pp, &with_fault("crash", "crash-loop")?).await?;
        api.create(&pp, &with_fault("pull", "image-pull-failure")?)
            .await?;
        api.create(&pp, &with_fault("slow", "slow-start=3s")?)
            .await?;
        let mut held = pod("held", &sim, "reg.invalid/app:v1", json!({}))?;
        held.metadata.finalizers = Some(vec!["inplace.dev/test-hold".into()]);
        api.create(&pp, &held).await?;

        let (p, _) = wait_pod(&api, "crash", Duration::from_secs(60), "crash loop", |p| {
            container_status(p).is_some_and(|c| c.restart_count >= 2)
        })
        .await?;
        ensure!(!pod_ready(&p));
        let waiting = |p: &Pod| {
            container_status(p)
                .and_then(|c| c.state.as_ref()?.waiting.as_ref()?.reason.clone())
                .unwrap_or_default()
        };
        wait_pod(
            &api,
            "crash",
            Duration::from_secs(30),
            "CrashLoopBackOff",
            |p| waiting(p) == "CrashLoopBackOff",
        )
        .await?;
        let (p, _) = wait_pod(
            &api,
            "pull",
            Duration::from_secs(30),
            "ImagePullBackOff",
            |p| waiting(p) == "ImagePullBackOff",
        )
        .await?;
        ensure!(!pod_ready(&p));
        ensure!(p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending"));
        let (p, _) = wait_pod(
            &api,
            "slow",
            Duration::from_secs(30),
            "slow Ready",
            pod_ready,
        )
        .await?;
        // Status times have second precision: startedAt → Ready transition ≥ 3 s ± 1 s.
        let started = container_status(&p)
            .and_then(|c| c.state.as_ref()?.running.as_ref()?.started_at.clone())
            .context("startedAt")?;
        let ready_at = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready"))
            .and_then(|c| c.last_transition_time.clone())
            .context("Ready lastTransitionTime")?;
        let gap = ready_at.0.as_second() - started.0.as_second();
        println!("slow-start=3s (ready-delay 500ms): Ready {gap}s after the container started");
        ensure!((3..=5).contains(&gap), "slow start gap {gap}s");

        // Graceful deletion: the simulator waits min(30 s, --max-grace 2 s), then deletes
        // with grace 0. A finalizer keeps the object; the simulator must not loop on it.
        wait_pod(
            &api,
            "held",
            Duration::from_secs(30),
            "held Ready",
            pod_ready,
        )
        .await?;
        let t0 = Instant::now();
        api.delete("held", &DeleteParams::default()).await?;
        api.delete("slow", &DeleteParams::default()).await?;
        wait_pod(
            &api,
            "held",
            Duration::from_secs(30),
            "final delete (grace 0)",
            |p| p.metadata.deletion_grace_period_seconds == Some(0),
        )
        .await?;
        println!(
            "final delete after {:.2}s (max-grace 2s)",
            t0.elapsed().as_secs_f64()
        );
        wait_for(
            Duration::from_secs(30),
            Duration::from_millis(200),
            "slow deleted",
            || {
                let api = api.clone();
                async move { Ok(api.get_opt("slow").await?.is_none().then_some(())) }
            },
        )
        .await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let deletes_before = sim.stat("deletes");
        tokio::time::sleep(Duration::from_secs(3)).await;
        ensure!(
            sim.stat("deletes") == deletes_before,
            "no repeated deletes of a held pod"
        );
        ensure!(
            deletes_before.as_deref() == Some("2"),
            "deletes={deletes_before:?}"
        );
        ensure!(
            api.get_opt("held").await?.is_some(),
            "the finalizer holds the object"
        );
        api.patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "finalizers": null } })),
        )
        .await?;
        wait_for(
            Duration::from_secs(30),
            Duration::from_millis(200),
            "held gone",
            || {
                let api = api.clone();
                async move { Ok(api.get_opt("held").await?.is_none().then_some(())) }
            },
        )
        .await?;
        Ok(())
    }
    .await;
    // Never leave the held pod behind, whatever failed above.
    let _ = Api::<Pod>::namespaced(client.clone(), &group)
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "finalizers": null } })),
        )
        .await;
    let cleanup = bed::delete_namespace_and_wait(&client, &group, Duration::from_secs(60)).await;
    result?;
    cleanup
}

/// Status writes the kubelet makes for one in-place container restart (an image patch of
/// a Ready pod, until the pod is Ready again with the container restarted once and the
/// writes have stopped for [`QUIET`]): counted from a watch of the pod, the kubelet's
/// writes told apart from the others by what they change ([`benchcalc::pod_writer`]).
/// Returns the count and the time from the patch to Ready.
async fn kubelet_writes_of_an_image_patch(
    api: &Api<Pod>,
    name: &str,
    image: &str,
) -> Result<(u64, Duration)> {
    use futures::StreamExt;
    use inplace_tests::benchcalc::{self, PodFacts, PodWriter};
    use kube::api::{WatchEvent, WatchParams};
    use std::sync::{Arc, Mutex};

    /// The writes that follow Ready (the container's `started` flag, say) still count:
    /// the measurement ends once none came for this long.
    const QUIET: Duration = Duration::from_secs(3);

    let before = get(api, name).await?;
    let rv = before
        .metadata
        .resource_version
        .clone()
        .context("resourceVersion")?;
    let seen: Arc<Mutex<(Vec<Pod>, Instant)>> = Arc::new(Mutex::new((Vec::new(), Instant::now())));
    let mut stream = api
        .watch(
            &WatchParams::default().fields(&format!("metadata.name={name}")),
            &rv,
        )
        .await?
        .boxed();
    let collector = {
        let seen = seen.clone();
        tokio::spawn(async move {
            while let Some(Ok(event)) = stream.next().await {
                if let WatchEvent::Modified(p) = event
                    && let Ok(mut s) = seen.lock()
                {
                    s.0.push(p);
                    s.1 = Instant::now();
                }
            }
        })
    };
    let t0 = Instant::now();
    set_image(api, name, image).await?;
    let (_, took) = wait_pod(
        api,
        name,
        Duration::from_secs(120),
        "restarted and Ready",
        |p| pod_ready(p) && container_status(p).is_some_and(|c| c.restart_count == 1 && c.ready),
    )
    .await?;
    let mut waited = Duration::ZERO;
    while waited < Duration::from_secs(30) {
        let last = seen.lock().map(|s| s.1).unwrap_or_else(|_| Instant::now());
        if last.elapsed() >= QUIET {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        waited += Duration::from_millis(200);
    }
    collector.abort();
    let pods = seen.lock().map(|s| s.0.clone()).unwrap_or_default();
    let mut previous = PodFacts::of(&before);
    let mut kubelet = 0;
    for p in &pods {
        let facts = PodFacts::of(p);
        if benchcalc::pod_writer(Some(&previous), Some(&facts)) == PodWriter::Kubelet {
            kubelet += 1;
        }
        previous = facts;
    }
    println!(
        "{name}: {} watch events after the patch, {kubelet} by the kubelet; Ready again {:.2}s after the patch (watched {:.1}s)",
        pods.len(),
        took.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
    Ok((kubelet, took))
}

/// Issue 15 item 2: the simulated kubelet must load the API server at least as the real
/// one does. The same pod (image, readiness probe) on the bed's real node and on a
/// simulated node gets an image patch (an in-place container restart); the simulator's
/// status writes for it are at least the real kubelet's.
#[tokio::test]
#[ignore = "needs the test bed (tests/testbed/up)"]
async fn the_simulator_writes_status_at_least_as_often_as_the_real_kubelet_per_in_place_restart()
-> Result<()> {
    let client = client().await?;
    let group = format!("nst-writes-{}", suffix());
    let sim = sim_with_namespace(
        &client,
        &group,
        1,
        &["--update-delay", "1s", "--ready-delay", "500ms"],
    )
    .await?;
    let image = |v: &str| {
        std::env::var(format!("INPLACE_TEST_IMAGE_{}", v.to_uppercase()))
            .unwrap_or_else(|_| format!("127.0.0.1:5000/inplace-test/app:{v}"))
    };
    let real_node = std::env::var("INPLACE_NODE_NAME").unwrap_or_else(|_| "inplace-node-0".into());
    let probe = json!({
        "httpGet": { "path": "/healthz", "port": 8080 },
        "periodSeconds": 1,
    });
    let result = async {
        let api: Api<Pod> = Api::namespaced(client.clone(), &group);
        let mut real = pod("real", &sim, &image("v1"), json!({}))?;
        let mut simulated = pod("simulated", &sim, &image("v1"), json!({}))?;
        for p in [&mut real, &mut simulated] {
            let spec = p.spec.as_mut().context("spec")?;
            spec.containers[0].readiness_probe = Some(serde_json::from_value(probe.clone())?);
            spec.termination_grace_period_seconds = Some(5);
        }
        // The real pod goes to the real node: no simulator selector or toleration.
        if let Some(spec) = real.spec.as_mut() {
            spec.node_selector = None;
            spec.tolerations = None;
            spec.node_name = Some(real_node.clone());
        }
        for p in [&real, &simulated] {
            api.create(&PostParams::default(), p).await?;
        }
        for name in ["real", "simulated"] {
            wait_pod(&api, name, Duration::from_secs(120), "pod Ready", pod_ready).await?;
        }
        let (real_writes, real_took) =
            kubelet_writes_of_an_image_patch(&api, "real", &image("v2")).await?;
        let (sim_writes, sim_took) =
            kubelet_writes_of_an_image_patch(&api, "simulated", &image("v2")).await?;
        println!(
            "kubelet status writes per in-place restart: real kubelet {real_writes} ({:.2}s to Ready), simulator {sim_writes} ({:.2}s to Ready)",
            real_took.as_secs_f64(),
            sim_took.as_secs_f64()
        );
        ensure!(real_writes >= 1, "the real kubelet's writes were not seen");
        ensure!(
            sim_writes >= real_writes,
            "the simulator wrote {sim_writes} times for an in-place restart, the real kubelet {real_writes}"
        );
        Ok(())
    }
    .await;
    // The real kubelet took from 10 to 45 s to finish the real pod's graceful deletion:
    // not what this test measures, so the pods go at once and the wait is generous.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &group);
    for name in ["real", "simulated"] {
        let _ = pods
            .delete(name, &DeleteParams::default().grace_period(0))
            .await;
    }
    let cleanup = bed::delete_namespace_and_wait(&client, &group, Duration::from_secs(120)).await;
    result?;
    cleanup
}
