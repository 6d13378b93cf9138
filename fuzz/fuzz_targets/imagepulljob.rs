//! ImagePullJob objects (anyone who may create one in a namespace) as the controller
//! reads them from the API server (JSON), with the NodeImage the daemons report on:
//! the target nodes (node names, node and pod selectors), the NodeImage entries to write,
//! the job status from the reported tags, TTLs and deadlines, the pull Secrets to mirror
//! for the daemons. Input: the job JSON, NUL, the NodeImage JSON of node `n1` (optional).
#![no_main]

use std::collections::BTreeMap;

use inplace_controller::imagepulljob::{plan, secrets};
use inplace_fuzz::{now, object, ready_node, texts};
use inplace_proto::{ImagePullJob, NodeImage};
use k8s_openapi::api::core::v1::Pod;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let t = texts(data, 2);
    let Some(job) = object::<ImagePullJob>(&t[0]) else {
        return;
    };
    let mut node_images = BTreeMap::new();
    if let Some(ni) = object::<NodeImage>(&t[1]) {
        node_images.insert("n1".to_owned(), ni);
    }
    let nodes = [ready_node("n1"), ready_node("n2")];
    let pods: Vec<Pod> = serde_json::from_value(serde_json::json!([
        {"metadata": {"name": "p1", "namespace": "default", "labels": {"app": "a"}},
         "spec": {"nodeName": "n1", "containers": []}},
        {"metadata": {"name": "p2", "namespace": "default", "labels": {"app": "b"}},
         "spec": {"containers": []}}
    ]))
    .unwrap_or_default();
    for jitter in [0, 300, -600, i32::MAX, i32::MIN] {
        let input = plan::Input {
            job: &job,
            node_images: &node_images,
            nodes: &nodes,
            pods: &pods,
            now: now(),
            ttl_jitter_seconds: jitter,
        };
        let _ = plan::target_nodes(&input);
        let _ = plan::tag_pull_policy(&job, jitter);
        let _ = plan::plan(&input);
    }
    let _ = plan::split_image(&job.spec.image);
    let wanted = secrets::wanted([&job], "kruise-daemon-config");
    for (ns, name) in wanted.keys() {
        let _ = secrets::copy_name(ns, name);
    }
});
