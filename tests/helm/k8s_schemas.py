#!/usr/bin/env python3
"""Builds kubeconform schemas offline from files fetched through the Go module proxy.

Two inputs:
  * Kubernetes' OpenAPI v2 document (api/openapi-spec/swagger.json in the k8s.io/kubernetes module);
  * CustomResourceDefinition YAML files (the prometheus-operator module's example CRDs), whose
    openAPIV3Schema becomes the schema of that kind.

Output: one JSON schema per kind and version, named as kubeconform's default layout names them
(`deployment-apps-v1.json`, `service-v1.json`, `podmonitor-monitoring-v1.json`), so that
`kubeconform -schema-location 'DIR/{{.ResourceKind}}{{.KindSuffix}}.json'` finds them.

Each file holds the kind's definition plus the definitions it references (transitively) under
`definitions`, so recursive types stay finite and every file stands alone. With --strict, every
object that lists its properties and says nothing about others gets additionalProperties: false,
so a misspelt or misplaced field fails validation instead of being silently dropped by the API
server. Kubernetes' IntOrString and Quantity are widened to what YAML actually carries (a string
or a number), as the API server accepts them.
"""
import argparse
import json
import os
import sys

import yaml

INT_OR_STRING = {"oneOf": [{"type": "string"}, {"type": "integer"}]}
QUANTITY = {"oneOf": [{"type": "string"}, {"type": "number"}]}


def kind_suffix(group, version):
    """kubeconform's {{.KindSuffix}}: -<first label of group>-<version>, or -<version> for core."""
    if not group:
        return "-" + version.lower()
    return "-" + group.split(".")[0].lower() + "-" + version.lower()


def fix_node(node, strict):
    """Rewrites one schema node in place (recursively): int-or-string, strictness."""
    if isinstance(node, list):
        for item in node:
            fix_node(item, strict)
        return
    if not isinstance(node, dict):
        return
    if node.get("format") == "int-or-string" or node.get("x-kubernetes-int-or-string"):
        desc = node.get("description")
        for k in ("type", "format", "x-kubernetes-int-or-string", "anyOf", "pattern"):
            node.pop(k, None)
        node.update(json.loads(json.dumps(INT_OR_STRING)))
        if desc:
            node["description"] = desc
    for key, value in list(node.items()):
        if key in ("properties", "definitions", "patternProperties"):
            for sub in value.values():
                fix_node(sub, strict)
        elif key in ("items", "additionalProperties", "not"):
            fix_node(value, strict)
        elif key in ("allOf", "anyOf", "oneOf"):
            fix_node(value, strict)
    if (strict and "properties" in node and "additionalProperties" not in node
            and not node.get("x-kubernetes-preserve-unknown-fields")):
        node["additionalProperties"] = False


def refs_in(node, found):
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/definitions/"):
            found.add(ref[len("#/definitions/"):])
        for v in node.values():
            refs_in(v, found)
    elif isinstance(node, list):
        for v in node:
            refs_in(v, found)


def closure(defs, name):
    seen, todo = set(), [name]
    while todo:
        n = todo.pop()
        if n in seen or n not in defs:
            continue
        seen.add(n)
        found = set()
        refs_in(defs[n], found)
        todo.extend(found - seen)
    return seen


def from_swagger(path, out_dir, strict):
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    defs = doc["definitions"]
    # Widen the two scalar types whose Go form accepts more than the spec's "type: string".
    for name, d in defs.items():
        if name.endswith("apimachinery.pkg.util.intstr.IntOrString"):
            defs[name] = dict(INT_OR_STRING, description=d.get("description", ""))
        elif name.endswith("apimachinery.pkg.api.resource.Quantity"):
            defs[name] = dict(QUANTITY, description=d.get("description", ""))
    for d in defs.values():
        fix_node(d, strict)
    count = 0
    for name, d in defs.items():
        for gvk in d.get("x-kubernetes-group-version-kind", []):
            kind, group, version = gvk["kind"], gvk.get("group", ""), gvk["version"]
            if kind in ("DeleteOptions", "WatchEvent", "Status", "APIGroup", "APIVersions"):
                continue
            needed = closure(defs, name) - {name}
            schema = json.loads(json.dumps(d))
            schema["$schema"] = "http://json-schema.org/draft-07/schema#"
            api_version = f"{group}/{version}" if group else version
            props = schema.setdefault("properties", {})
            props["apiVersion"] = {"type": "string", "enum": [api_version]}
            props["kind"] = {"type": "string", "enum": [kind]}
            if needed:
                schema["definitions"] = {n: defs[n] for n in sorted(needed)}
            fname = kind.lower() + kind_suffix(group, version) + ".json"
            with open(os.path.join(out_dir, fname), "w", encoding="utf-8") as f:
                json.dump(schema, f, separators=(",", ":"))
            count += 1
    return count


def from_crds(paths, out_dir, strict):
    count = 0
    for path in paths:
        with open(path, encoding="utf-8") as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        for crd in docs:
            if crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            group, kind = spec["group"], spec["names"]["kind"]
            for ver in spec["versions"]:
                schema = json.loads(json.dumps(ver["schema"]["openAPIV3Schema"]))
                fix_node(schema, strict)
                props = schema.setdefault("properties", {})
                # A CRD's metadata is the standard ObjectMeta; keep it loose but typed.
                props["metadata"] = {"type": "object"}
                props["apiVersion"] = {"type": "string", "enum": [f"{group}/{ver['name']}"]}
                props["kind"] = {"type": "string", "enum": [kind]}
                schema["$schema"] = "http://json-schema.org/draft-07/schema#"
                fname = kind.lower() + kind_suffix(group, ver["name"]) + ".json"
                with open(os.path.join(out_dir, fname), "w", encoding="utf-8") as f:
                    json.dump(schema, f, separators=(",", ":"))
                count += 1
    return count


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--swagger", help="Kubernetes api/openapi-spec/swagger.json")
    ap.add_argument("--crd", action="append", default=[], help="CRD YAML file (repeatable)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--strict", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    n = 0
    if args.swagger:
        n += from_swagger(args.swagger, args.out, args.strict)
    n += from_crds(args.crd, args.out, args.strict)
    if n == 0:
        sys.exit("no schemas written")
    print(f"wrote {n} schemas to {args.out}")


if __name__ == "__main__":
    main()
