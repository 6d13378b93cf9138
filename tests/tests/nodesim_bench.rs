//! Scale bench of the node simulator on the real test bed: 1,000 nodes, 10,000 pods
//! (ten Deployments of 1,000), time to all Ready, and the simulator's CPU and RSS.
//!
//! ```text
//! cargo build --release -p inplace-tests --bin inplace-nodesim   # optional, see below
//! INPLACE_TESTBED_KUBECONFIG=/var/tmp/inplace-testbed/kubeconfig \
//! INPLACE_NODESIM_BIN=$CARGO_TARGET_DIR/release/inplace-nodesim \
//!   cargo test -p inplace-tests --test nodesim_bench -- --ignored --nocapture
//! ```
//!
//! Without `INPLACE_NODESIM_BIN` the test profile's build of the simulator is used.

use std::time::{Duration, Instant};

use anyhow::Result;
use inplace_tests::bed::{Sim, client, delete_namespace, namespace, pod_ready, suffix, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;

const NODES: usize = 1_000;
const DEPLOYMENTS: usize = 10;
const REPLICAS: usize = 1_000;

#[tokio::test]
#[ignore = "needs the test bed (tests/testbed/up); a few minutes of load"]
async fn thousand_nodes_ten_thousand_pods() -> Result<()> {
    let bin = std::env::var("INPLACE_NODESIM_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_inplace-nodesim").to_owned());
    println!("simulator binary: {bin}");
    let client = client().await?;
    let group = format!("nsb-{}", suffix());
    let mut sim = Sim::start(
        std::path::Path::new(&bin),
        &group,
        NODES,
        &["--stats-interval", "10s"],
    )?;
    let took = sim
        .wait_nodes_ready(&client, Duration::from_secs(300))
        .await?;
    println!("{NODES} nodes Ready in {:.1}s", took.as_secs_f64());
    tokio::time::sleep(Duration::from_secs(11)).await;
    println!(
        "idle with {NODES} nodes: {}",
        sim.last_report().unwrap_or_default()
    );

    namespace(&client, &group).await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &group);
    let t0 = Instant::now();
    for i in 0..DEPLOYMENTS {
        let d: Deployment = serde_json::from_value(json!({
            "metadata": { "name": format!("bench-{i}") },
            "spec": {
                "replicas": REPLICAS,
                "selector": { "matchLabels": { "app": format!("bench-{i}") } },
                "template": {
                    "metadata": { "labels": { "app": format!("bench-{i}"), "bench": "yes" } },
                    "spec": {
                        "nodeSelector": sim.selector(),
                        "tolerations": sim.tolerations(),
                        "terminationGracePeriodSeconds": 5,
                        "containers": [{ "name": "app", "image": "registry.invalid/app:v1" }],
                    },
                },
            },
        }))?;
        deployments.create(&PostParams::default(), &d).await?;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &group);
    let want = DEPLOYMENTS * REPLICAS;
    let mut last_print = Instant::now();
    let result = wait_for(
        Duration::from_secs(900),
        Duration::from_secs(3),
        "10,000 pods Ready",
        || {
            let pods = pods.clone();
            let print = last_print.elapsed() > Duration::from_secs(20);
            if print {
                last_print = Instant::now();
            }
            async move {
                let list = pods
                    .list(&ListParams::default().labels("bench=yes"))
                    .await?;
                let ready = list.items.iter().filter(|p| pod_ready(p)).count();
                if print {
                    println!(
                        "  {:>6.1}s: {} pods, {ready} Ready",
                        t0.elapsed().as_secs_f64(),
                        list.items.len()
                    );
                }
                Ok((ready >= want).then_some(()))
            }
        },
    )
    .await;
    match &result {
        Ok((_, took)) => println!(
            "{want} pods Ready {:.1}s after the Deployments were created",
            took.as_secs_f64()
        ),
        Err(e) => println!("not all Ready: {e:#}"),
    }
    tokio::time::sleep(Duration::from_secs(11)).await;
    println!(
        "with {want} pods: {}",
        sim.last_report().unwrap_or_default()
    );
    tokio::time::sleep(Duration::from_secs(30)).await;
    println!(
        "30 s later (steady state): {}",
        sim.last_report().unwrap_or_default()
    );

    let t1 = Instant::now();
    delete_namespace(&client, &group).await;
    let gone = wait_for(
        Duration::from_secs(900),
        Duration::from_secs(3),
        "pods deleted",
        || {
            let pods = pods.clone();
            async move {
                Ok(pods
                    .list(&ListParams::default().labels("bench=yes"))
                    .await?
                    .items
                    .is_empty()
                    .then_some(()))
            }
        },
    )
    .await;
    if gone.is_ok() {
        println!("{want} pods deleted in {:.1}s", t1.elapsed().as_secs_f64());
    }
    sim.stop()?;
    println!("at exit: {}", sim.last_report().unwrap_or_default());
    result?;
    gone?;
    Ok(())
}
