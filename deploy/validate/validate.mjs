// Validates rendered Kubernetes manifests (`kubectl kustomize ... | node validate.mjs`)
// against the Kubernetes API schemas, offline, in two passes:
//
//   1. Schema: every object through its kubernetes-models class (types, required fields,
//      formats, enums), prometheus-operator's PodMonitor/ServiceMonitor included.
//   2. Field names: kubernetes-models' validators accept unknown fields (they are JSON
//      Schemas without additionalProperties: false), so a typo such as `imagePullPolicyy`
//      would pass pass 1. Every object is also written as a TypeScript object literal
//      typed with its model's interface and type-checked with `tsc --noEmit`: TypeScript's
//      excess-property check rejects any field the API does not define, at any depth.
//
// Usage: node validate.mjs [FILE]   (stdin when no FILE). Exit 0 when every object passes;
// 1 with one line per problem naming the object (kind/name) and the field otherwise.
import { readFileSync, writeFileSync, mkdtempSync, rmSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { execFileSync } from "node:child_process";
import { parseAllDocuments } from "yaml";

const here = dirname(fileURLToPath(import.meta.url));

// apiVersion -> the module folder of its models.
function modulePath(apiVersion, kind) {
  if (apiVersion.startsWith("monitoring.coreos.com/")) {
    return `@kubernetes-models/prometheus-operator/${apiVersion}/${kind}`;
  }
  return `kubernetes-models/${apiVersion}/${kind}`;
}

function describe(doc) {
  return `${doc?.kind ?? "?"}/${doc?.metadata?.name ?? "?"}`;
}

function readDocuments(text) {
  const problems = [];
  const docs = [];
  for (const parsed of parseAllDocuments(text)) {
    if (parsed.errors.length > 0) {
      problems.push(`YAML: ${parsed.errors[0].message}`);
      continue;
    }
    const doc = parsed.toJS();
    if (doc === null || doc === undefined) continue;
    // kustomize wraps a Secret's base64 at 70 columns; the API server's decoder (Go's
    // encoding/base64) ignores the line breaks, the schema's "byte" format does not.
    if (doc.kind === "Secret" && doc.data) {
      for (const key of Object.keys(doc.data)) doc.data[key] = String(doc.data[key]).replace(/\s+/g, "");
    }
    docs.push(doc);
  }
  return { docs, problems };
}

async function schemaPass(docs) {
  const problems = [];
  for (const doc of docs) {
    if (typeof doc.apiVersion !== "string" || typeof doc.kind !== "string") {
      problems.push(`${describe(doc)}: no apiVersion/kind`);
      continue;
    }
    let model;
    try {
      model = (await import(modulePath(doc.apiVersion, doc.kind)))[doc.kind];
    } catch {
      problems.push(`${describe(doc)}: unknown kind ${doc.kind} in ${doc.apiVersion}`);
      continue;
    }
    try {
      new model(doc).validate();
    } catch (error) {
      problems.push(`${describe(doc)}: ${error.message.split("\n")[0]}`);
    }
  }
  return problems;
}

function fieldNamePass(docs) {
  const lines = [];
  docs.forEach((doc, i) => {
    const type = `I${doc.kind}`;
    lines.push(`import type { ${type} as T${i} } from "${modulePath(doc.apiVersion, doc.kind)}";`);
    lines.push(`export const doc${i}: T${i} = ${JSON.stringify(doc, null, 1)};`);
  });
  // Beside node_modules, so that the model imports resolve.
  const dir = mkdtempSync(join(here, ".check-"));
  try {
    const file = join(dir, "manifests.ts");
    writeFileSync(file, lines.join("\n") + "\n");
    const tsc = join(here, "node_modules", "typescript", "bin", "tsc");
    execFileSync(process.execPath, [tsc, "--noEmit", "--strict", "--module", "nodenext", "--moduleResolution", "nodenext",
                                    "--target", "es2022", "--skipLibCheck", file],
                 { cwd: here, encoding: "utf8", stdio: "pipe" });
    return [];
  } catch (error) {
    const out = `${error.stdout ?? ""}${error.stderr ?? ""}`;
    const source = readFileSync(join(dir, "manifests.ts"), "utf8").split("\n");
    return out.split("\n").filter((l) => l.includes("error TS")).map((l) => {
      const m = l.match(/manifests\.ts\((\d+),\d+\): (.*)$/);
      if (!m) return l;
      // The object a line belongs to: the nearest `export const docN` above it.
      let at = Number(m[1]) - 1;
      while (at > 0 && !source[at].startsWith("export const doc")) at--;
      const index = Number(source[at].match(/doc(\d+)/)?.[1] ?? -1);
      return `${describe(docs[index])}: ${m[2]}`;
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const text = readFileSync(process.argv[2] ?? 0, "utf8");
const { docs, problems } = readDocuments(text);
if (docs.length === 0 && problems.length === 0) problems.push("no Kubernetes objects in the input");
problems.push(...(await schemaPass(docs)));
if (problems.length === 0) problems.push(...fieldNamePass(docs));
for (const p of problems) console.log(p);
if (problems.length === 0) console.log(`${docs.length} objects valid`);
process.exit(problems.length === 0 ? 0 : 1);
