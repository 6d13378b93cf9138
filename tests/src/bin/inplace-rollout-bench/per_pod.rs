//! `--scenario per-pod`: in place against delete-and-recreate on the real kubelet.

use super::*;

/// The bed's variable `name`, or `default`.
pub(super) fn bed_env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

/// The test app's pod on the real node (as `tests/testbed/selftest` runs it): Ready once
/// its HTTP readiness probe answers.
pub(super) fn real_pod(name: &str, node: &str, image: &str) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"app": "per-pod"}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 30,
            "containers": [{
                "name": "app",
                "image": image,
                "ports": [{"containerPort": 8080}],
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 1},
            }],
        },
    }))?)
}

/// The ID of the pod's container, when it runs and is ready (else None).
pub(super) fn ready_container(p: &Pod) -> Option<String> {
    let status = p.status.as_ref()?.container_statuses.as_ref()?.first()?;
    (status.ready && pod_ready(p))
        .then(|| status.container_id.clone())
        .flatten()
}

/// Waits (through a watch) until pod `name` is Ready with a ready container other than
/// `not`; returns that container's ID.
pub(super) async fn wait_new_container(
    pods: &Api<Pod>,
    name: &str,
    not: Option<&str>,
    timeout: Duration,
) -> Result<String> {
    let cond = |p: Option<&Pod>| {
        p.and_then(ready_container)
            .is_some_and(|id| Some(id.as_str()) != not)
    };
    let pod = tokio::time::timeout(
        timeout,
        kube::runtime::wait::await_condition(pods.clone(), name, cond),
    )
    .await
    .with_context(|| format!("pod {name} not Ready with a new container in {timeout:?}"))??;
    pod.as_ref()
        .and_then(ready_container)
        .with_context(|| format!("pod {name} gone"))
}

pub(super) async fn per_pod(args: &Args, client: &Client, report: &mut Report) -> Result<()> {
    let ns = format!("ipb-p-{}", suffix());
    namespace(client, &ns).await?;
    let result = per_pod_in(args, client, &ns, report).await;
    if let Err(e) = delete_namespace_and_wait(client, &ns, Duration::from_secs(120)).await {
        report.add(format!("per-pod: cleanup: {e:#}"));
    }
    result
}

pub(super) async fn per_pod_in(
    args: &Args,
    client: &Client,
    ns: &str,
    report: &mut Report,
) -> Result<()> {
    let node = bed_env("INPLACE_NODE_NAME", "inplace-node-0");
    let images = [
        bed_env(
            "INPLACE_TEST_IMAGE_V1",
            "127.0.0.1:5000/inplace-test/app:v1",
        ),
        bed_env(
            "INPLACE_TEST_IMAGE_V2",
            "127.0.0.1:5000/inplace-test/app:v2",
        ),
    ];
    let timeout = Duration::from_secs(args.timeout_secs.min(300));
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut name = "app-0".to_owned();
    let mut image = 0;
    pods.create(
        &PostParams::default(),
        &real_pod(&name, &node, &images[image])?,
    )
    .await?;
    let mut container = wait_new_container(&pods, &name, None, timeout).await?;
    let (mut in_place, mut recreate) = (Vec::new(), Vec::new());
    for round in 0..args.per_pod_rounds {
        // In place: the image of the running pod changes; the kubelet restarts its container.
        image = 1 - image;
        let patch = json!({"spec": {"containers": [{"name": "app", "image": images[image]}]}});
        let t0 = Instant::now();
        pods.patch(&name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await?;
        // The pod is deleted next: its new container's ID is not needed.
        wait_new_container(&pods, &name, Some(&container), timeout).await?;
        in_place.push(t0.elapsed());
        // Delete and recreate: the pod goes, a replacement with the other image comes
        // (as a workload controller makes it once the old pod is terminating).
        image = 1 - image;
        let next = format!("app-{}", round + 1);
        let t0 = Instant::now();
        pods.delete(&name, &kube::api::DeleteParams::default())
            .await?;
        pods.create(
            &PostParams::default(),
            &real_pod(&next, &node, &images[image])?,
        )
        .await?;
        container = wait_new_container(&pods, &next, None, timeout).await?;
        recreate.push(t0.elapsed());
        progress(format!(
            "per-pod round {}: in place {:.2}s, delete-and-recreate {:.2}s",
            round + 1,
            secs(in_place[round]),
            secs(recreate[round])
        ));
        // The old pod is gone before the next round (not measured).
        wait_pods_gone_named(&pods, &name, timeout).await?;
        name = next;
    }
    let (a, b) = (
        benchcalc::median(&mut in_place),
        benchcalc::median(&mut recreate),
    );
    report.add(format!(
        "per-pod on the real kubelet ({node}), {} of each: in place (patch -> new container Ready) median {:.2}s [{}], delete-and-recreate (delete -> replacement Ready) median {:.2}s [{}], ratio {:.2}",
        args.per_pod_rounds,
        secs(a),
        benchcalc::secs_list(&in_place),
        secs(b),
        benchcalc::secs_list(&recreate),
        benchcalc::ratio(b, a),
    ));
    Ok(())
}

/// Waits until pod `name` no longer exists.
pub(super) async fn wait_pods_gone_named(
    pods: &Api<Pod>,
    name: &str,
    timeout: Duration,
) -> Result<()> {
    tokio::time::timeout(
        timeout,
        kube::runtime::wait::await_condition(pods.clone(), name, |p: Option<&Pod>| p.is_none()),
    )
    .await
    .with_context(|| format!("pod {name} still there after {timeout:?}"))??;
    Ok(())
}
