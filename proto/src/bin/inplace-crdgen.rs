//! `inplace-crdgen [--out DIR] [--check]`: writes the CRDs of `inplace_proto::crdgen` to
//! `DIR/apps.kruise.io_<plural>.yaml`, or with `--check` compares them and exits 1 with a
//! summary of the differences.
//!
//! `DIR` defaults to the workspace's `deploy/crds` (found from this crate's manifest
//! directory at build time), so the command works from any working directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use inplace_proto::crdgen;

/// Generated files are recognised by this prefix (for stale-file detection).
const GENERATED_PREFIX: &str = "apps.kruise.io_";

fn usage() -> &'static str {
    "usage: inplace-crdgen [--out DIR] [--check]\n  --out DIR  directory of the CRD files (default: <workspace>/deploy/crds)\n  --check    do not write; exit 1 when the files differ from the generated ones"
}

fn main() -> ExitCode {
    let mut out: Option<PathBuf> = None;
    let mut check = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--check" => check = true,
            "--out" => match args.next() {
                Some(dir) => out = Some(PathBuf::from(dir)),
                None => {
                    eprintln!("inplace-crdgen: --out needs a directory\n{}", usage());
                    return ExitCode::from(2);
                }
            },
            "-h" | "--help" => {
                println!("{}", usage());
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("inplace-crdgen: unknown argument `{other}`\n{}", usage());
                return ExitCode::from(2);
            }
        }
    }
    let out = out.unwrap_or_else(|| {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        manifest
            .parent()
            .unwrap_or(manifest)
            .join(crdgen::DEFAULT_OUT_DIR)
    });
    match run(&out, check) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("inplace-crdgen: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(out: &Path, check: bool) -> Result<ExitCode, Box<dyn std::error::Error>> {
    let files = crdgen::render()?;
    let mut on_disk = BTreeMap::new();
    for (name, _) in &files {
        let path = out.join(name);
        let content = match std::fs::read_to_string(&path) {
            Ok(s) => Some(s),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(format!("{}: {e}", path.display()).into()),
        };
        on_disk.insert(name.clone(), content);
    }
    let stale = stale_files(out, &files)?;

    if check {
        let problems = crdgen::check(&files, &on_disk, &stale);
        if problems.is_empty() {
            println!("{} CRDs in {} are up to date", files.len(), out.display());
            return Ok(ExitCode::SUCCESS);
        }
        for p in &problems {
            println!("{}", p);
        }
        println!(
            "{} difference(s) in {}; run `cargo run -p inplace-proto --bin inplace-crdgen`",
            problems.len(),
            out.display()
        );
        return Ok(ExitCode::from(1));
    }

    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    for (name, content) in &files {
        if on_disk.get(name).and_then(Option::as_deref) == Some(content.as_str()) {
            continue;
        }
        let path = out.join(name);
        std::fs::write(&path, content).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("wrote {}", path.display());
    }
    for name in &stale {
        let path = out.join(name);
        std::fs::remove_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        println!("removed stale {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// Files in `out` that look generated but are not produced any more.
fn stale_files(out: &Path, files: &[(String, String)]) -> Result<Vec<String>, String> {
    let entries = match std::fs::read_dir(out) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("{}: {e}", out.display())),
    };
    let mut stale = Vec::new();
    for entry in entries {
        let name = entry
            .map_err(|e| format!("{}: {e}", out.display()))?
            .file_name()
            .to_string_lossy()
            .into_owned();
        if name.starts_with(GENERATED_PREFIX)
            && name.ends_with(".yaml")
            && !files.iter().any(|(n, _)| *n == name)
        {
            stale.push(name);
        }
    }
    stale.sort();
    Ok(stale)
}
