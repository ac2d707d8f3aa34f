#!/usr/bin/env python3
"""The public API of crates as a sorted listing, read from rustdoc's JSON.

Usage: public_api.py CRATE.json...

One line per public item, by the path a user writes: modules, types with
their public fields and variants, traits with their methods, functions and
methods with their signatures, constants, re-exports, and every trait a
public type implements, the auto traits (Send, Sync, Unpin, ...) included.
Blanket impls (`impl<T> From<T> for T`) are left out: they come with every
type. What the text listing this replaced could not see (trait impls, auto
traits, items made by macros) changes this listing, so a change to the
surface shows up in review.
"""

import json
import sys


def generic_args(args):
    if not args:
        return ""
    if "angle_bracketed" in args:
        a = args["angle_bracketed"]
        parts = []
        for arg in a.get("args", []):
            if "type" in arg:
                parts.append(ty(arg["type"]))
            elif "lifetime" in arg:
                parts.append(arg["lifetime"])
            elif "const" in arg:
                parts.append(str(arg["const"].get("expr", "_")))
            else:
                parts.append("_")
        for c in a.get("constraints", []):
            binding = c.get("binding", {})
            if "equality" in binding:
                value = binding["equality"]
                parts.append(f"{c['name']} = {ty(value['type']) if 'type' in value else '_'}")
            else:
                parts.append(f"{c['name']}: {bounds(binding.get('constraint', []))}")
        return f"<{', '.join(parts)}>" if parts else ""
    if "parenthesized" in args:
        p = args["parenthesized"]
        out = f" -> {ty(p['output'])}" if p.get("output") else ""
        return f"({', '.join(ty(t) for t in p['inputs'])}){out}"
    return ""


def path(p):
    return p["path"] + generic_args(p.get("args"))


def bound(b):
    if "trait_bound" in b:
        tb = b["trait_bound"]
        modifier = "?" if tb.get("modifier") == "maybe" else ""
        return modifier + path(tb["trait"])
    if "outlives" in b:
        return b["outlives"]
    return "_"


def bounds(bs):
    return " + ".join(bound(b) for b in bs)


def ty(t):
    if t is None:
        return "()"
    (kind, v), = t.items()
    if kind == "resolved_path":
        return path(v)
    if kind in ("generic", "primitive"):
        return v
    if kind == "tuple":
        return f"({', '.join(ty(x) for x in v)})"
    if kind == "slice":
        return f"[{ty(v)}]"
    if kind == "array":
        return f"[{ty(v['type'])}; {v['len']}]"
    if kind == "borrowed_ref":
        lt = f"{v['lifetime']} " if v.get("lifetime") else ""
        return f"&{lt}{'mut ' if v['is_mutable'] else ''}{ty(v['type'])}"
    if kind == "raw_pointer":
        return f"*{'mut' if v['is_mutable'] else 'const'} {ty(v['type'])}"
    if kind == "impl_trait":
        return f"impl {bounds(v)}"
    if kind == "dyn_trait":
        traits = " + ".join(path(p["trait"]) for p in v["traits"])
        lt = f" + {v['lifetime']}" if v.get("lifetime") else ""
        return f"dyn {traits}{lt}"
    if kind == "qualified_path":
        trait = f" as {path(v['trait'])}" if v.get("trait") else ""
        return f"<{ty(v['self_type'])}{trait}>::{v['name']}"
    if kind == "function_pointer":
        return "fn(" + ", ".join(ty(i[1]) for i in v["sig"]["inputs"]) + ")"
    return kind


def signature(name, fn):
    sig = fn["sig"]
    header = fn.get("header", {})
    prefix = "async " if header.get("is_async") else ""
    inputs = []
    for arg_name, arg_ty in sig["inputs"]:
        if arg_name == "self":
            inputs.append(ty(arg_ty).replace("Self", "self") if ty(arg_ty) != "Self" else "self")
        else:
            inputs.append(f"{arg_name}: {ty(arg_ty)}")
    out = f" -> {ty(sig['output'])}" if sig.get("output") else ""
    return f"{prefix}fn {name}({', '.join(inputs)}){out}"


def listing(doc):
    index, paths = doc["index"], doc["paths"]
    krate = index[str(doc["root"])]["name"]
    lines = set()

    def item_path(item_id, fallback):
        entry = paths.get(str(item_id))
        return "::".join(entry["path"]) if entry else fallback

    def walk(module_id, prefix):
        for child in index[str(module_id)]["inner"]["module"]["items"]:
            item = index.get(str(child))
            if item is None or item.get("visibility") != "public":
                continue
            describe(item, prefix)

    def impls_of(item, here):
        for impl_id in item["inner"][next(iter(item["inner"]))].get("impls", []):
            imp = index.get(str(impl_id))
            if imp is None:
                continue
            i = imp["inner"]["impl"]
            if i.get("blanket_impl") is not None:
                continue
            if i.get("trait"):
                auto = "auto " if i.get("is_synthetic") else ""
                neg = "!" if i.get("is_negative") else ""
                lines.add(f"{here}: {auto}impl {neg}{path(i['trait'])} for {ty(i['for'])}")
                continue
            for m in i["items"]:
                method = index.get(str(m))
                if method and method.get("visibility") == "public" and "function" in method["inner"]:
                    lines.add(f"{here}: {signature(method['name'], method['inner']['function'])}")

    def describe(item, prefix, name=None):
        (kind, inner), = item["inner"].items()
        name = name or item.get("name")
        here = f"{prefix}::{name}" if name else prefix
        if kind == "use":
            target = inner.get("id")
            sub = index.get(str(target)) if target is not None else None
            if inner.get("is_glob"):
                if sub is not None and "module" in sub["inner"]:
                    walk(target, prefix)
                else:
                    lines.add(f"{prefix}: pub use {inner['source']}::*")
            elif sub is not None:
                # A re-export of this crate's own item: listed where users
                # name it.
                describe(sub, prefix, inner["name"])
            else:
                lines.add(f"{prefix}: pub use {inner['source']} as {inner['name']}")
            return
        if kind == "module":
            lines.add(f"{here}: mod")
            walk(item["id"], here)
        elif kind == "struct":
            lines.add(f"{here}: struct")
            s = inner["kind"]
            fields = s.get("plain", {}).get("fields", []) if isinstance(s, dict) else []
            for f in fields:
                field = index.get(str(f))
                if field and field.get("visibility") == "public":
                    lines.add(f"{here}: field {field['name']}: {ty(field['inner']['struct_field'])}")
            impls_of(item, here)
        elif kind == "enum":
            lines.add(f"{here}: enum")
            for v in inner["variants"]:
                lines.add(f"{here}: variant {index[str(v)]['name']}")
            impls_of(item, here)
        elif kind == "trait":
            lines.add(f"{here}: trait")
            for m in inner["items"]:
                member = index.get(str(m))
                if member and "function" in member["inner"]:
                    lines.add(f"{here}: {signature(member['name'], member['inner']['function'])}")
            for imp in inner.get("implementations", []):
                i = index.get(str(imp))
                if i is not None:
                    lines.add(f"{here}: implemented for {ty(i['inner']['impl']['for'])}")
        elif kind == "function":
            lines.add(f"{prefix}: {signature(name, inner)}")
        elif kind in ("constant", "static"):
            lines.add(f"{here}: {kind} {ty(inner.get('type'))}")
        elif kind == "type_alias":
            lines.add(f"{here}: type = {ty(inner['type'])}")
        else:
            lines.add(f"{here}: {kind}")

    walk(doc["root"], krate)
    return lines


def main():
    out = set()
    for name in sys.argv[1:]:
        with open(name) as f:
            out |= listing(json.load(f))
    for line in sorted(out):
        print(line)


if __name__ == "__main__":
    main()
