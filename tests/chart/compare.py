#!/usr/bin/env python3
"""compare.py [options] WANT.yaml GOT.yaml: compares two multi-document manifests as sets
of objects keyed by (apiVersion, kind, namespace, name), semantically (parsed YAML, not
text). Prints the objects compared, or each difference; exits 1 on a difference.

  --ignore-label KEY          a label left out on both sides (Helm's own labels)
  --ignore-annotation KEY     an annotation left out on both sides
  --skip-kind KIND            objects of KIND left out on both sides
  --strip-cel-from-want       remove x-kubernetes-validations from WANT's objects (what the
                              chart sends a server older than 1.25)
Needs PyYAML (tests/tools/fetch validate's venv has it)."""
import argparse
import sys

import yaml


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def strip_cel(x):
    if isinstance(x, dict):
        x.pop("x-kubernetes-validations", None)
        for v in x.values():
            strip_cel(v)
    elif isinstance(x, list):
        for v in x:
            strip_cel(v)


def drop_keys(x, keys):
    """Removes the ignored label keys wherever they occur (labels, selectors, pod
    templates): Helm's release label is in the chart's selectors too."""
    if isinstance(x, dict):
        for k in keys:
            x.pop(k, None)
        for k, v in list(x.items()):
            drop_keys(v, keys)
            if k in ("labels", "annotations", "matchLabels") and v == {}:
                del x[k]
    elif isinstance(x, list):
        for v in x:
            drop_keys(v, keys)


def normalise(doc, args):
    drop_keys(doc, args.ignore_label)
    meta = doc.setdefault("metadata", {})
    m = meta.get("annotations") or {}
    for k in args.ignore_annotation:
        m.pop(k, None)
    if m:
        meta["annotations"] = m
    else:
        meta.pop("annotations", None)
    return doc


def key(doc):
    m = doc.get("metadata", {})
    return (doc.get("apiVersion"), doc.get("kind"), m.get("namespace", ""), m.get("name"))


def diff(a, b, path, out):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a:
                out.append(f"{path}.{k}: only in GOT: {b[k]!r:.200}")
            elif k not in b:
                out.append(f"{path}.{k}: only in WANT: {a[k]!r:.200}")
            else:
                diff(a[k], b[k], f"{path}.{k}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            diff(x, y, f"{path}[{i}]", out)
    elif a != b:
        out.append(f"{path}: WANT {a!r:.200} GOT {b!r:.200}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ignore-label", action="append", default=[])
    p.add_argument("--ignore-annotation", action="append", default=[])
    p.add_argument("--skip-kind", action="append", default=[])
    p.add_argument("--strip-cel-from-want", action="store_true")
    p.add_argument("want")
    p.add_argument("got")
    args = p.parse_args()
    sides = []
    for i, path in enumerate((args.want, args.got)):
        objs = {}
        for d in load(path):
            if d.get("kind") in args.skip_kind:
                continue
            if i == 0 and args.strip_cel_from_want:
                strip_cel(d)
            k = key(d)
            if k in objs:
                print(f"{path}: {k} twice")
                return 1
            objs[k] = normalise(d, args)
        sides.append(objs)
    want, got = sides
    out = []
    for k in sorted(set(want) | set(got), key=str):
        if k not in got:
            out.append(f"{k}: missing (only in WANT)")
        elif k not in want:
            out.append(f"{k}: extra (only in GOT)")
        else:
            d = []
            diff(want[k], got[k], "", d)
            out += [f"{k}{x}" for x in d]
    if out:
        print("\n".join(out[:60]))
        return 1
    print(f"{len(want)} objects equal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
