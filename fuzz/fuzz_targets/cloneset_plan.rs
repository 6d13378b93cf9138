//! CloneSet, pod, ControllerRevision and PVC manifests through the kubectl plugin's
//! parsers (`kubectl inplace plan -f cloneset.yaml --pods pods.yaml ...`), the same entry
//! points as `controller/tests/fuzz_inputs.rs`, then the whole planner and both
//! renderings on whatever loads. Input: the four texts separated by NUL (a missing or
//! empty text is a file not given).
#![no_main]

use inplace_controller::cli::{self, input, input::Source};
use inplace_fuzz::{plan_and_render, texts};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let t = texts(data, 4);
    let source = |name, text| Source { name, text };
    for text in &t {
        let s = source("f.yaml", text.as_str());
        let _ = input::documents(s);
    }
    let _ = input::cloneset(source("cloneset.yaml", &t[0]));
    let _ = input::pods(source("pods.yaml", &t[1]));
    let _ = input::revisions(source("revisions.yaml", &t[2]));
    let _ = input::pvcs(source("pvcs.yaml", &t[3]));

    let optional = |name, i: usize| (!t[i].is_empty()).then(|| source(name, t[i].as_str()));
    if let Ok(inputs) = cli::load(
        source("cloneset.yaml", &t[0]),
        optional("pods.yaml", 1),
        optional("revisions.yaml", 2),
        optional("pvcs.yaml", 3),
    ) {
        plan_and_render(&inputs);
    }
});
