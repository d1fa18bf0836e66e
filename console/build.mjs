// Copies the browser builds of the console's libraries (pinned in package-lock.json, installed by
// `npm ci`) into the Python package, where inferd serves them at /console/vendor/. The copies are
// committed: `make console` runs this only when the libraries are upgraded, and neither `make
// serve` nor the server nor the browser fetches anything at run time.
//
// Beside the copies it writes manifest.json: for each package the version and the npm tarball's
// integrity from package-lock.json, and the sha256 of each file copied from it.
// tests/console/test_vendor.py checks the committed files against it, and the manifest against the
// lock file.
//
//   node build.mjs             writes src/inferd/console/static/vendor/
//   node build.mjs --out DIR   writes DIR instead (`make console-check` compares the two)
import { createHash } from "node:crypto";
import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const outFlag = process.argv.indexOf("--out");
const vendor = outFlag > 0 ? resolve(process.argv[outFlag + 1])
  : join(here, "..", "src", "inferd", "console", "static", "vendor");

// package -> [file in the package, name under vendor/]. Alpine's CSP build: it evaluates the
// page's attribute expressions with its own parser, never `new Function`, so the console's
// Content-Security-Policy needs no 'unsafe-eval'.
const files = {
  "@alpinejs/csp": [["dist/cdn.min.js", "alpine-csp.min.js"]],
  "chart.js": [["dist/chart.umd.min.js", "chart.umd.min.js"]],
};

const lock = JSON.parse(readFileSync(join(here, "package-lock.json"), "utf8"));
const sha256 = (path) => createHash("sha256").update(readFileSync(path)).digest("hex");

rmSync(vendor, { recursive: true, force: true });
mkdirSync(vendor, { recursive: true });
const notices = [];
const manifest = { lock: "console/package-lock.json", packages: {} };
for (const [name, copies] of Object.entries(files)) {
  const root = join(here, "node_modules", name);
  const meta = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
  const locked = lock.packages[`node_modules/${name}`];
  if (!locked || locked.version !== meta.version) {
    throw new Error(`${name}: node_modules has ${meta.version}, package-lock.json ${locked && locked.version}: run npm ci`);
  }
  const entry = { version: meta.version, integrity: locked.integrity, license: meta.license, files: {} };
  for (const [source, target] of copies) {
    copyFileSync(join(root, source), join(vendor, target));
    entry.files[target] = { from: source, sha256: sha256(join(vendor, target)) };
    console.log(`vendor/${target} <- ${name}@${meta.version}/${source}`);
  }
  manifest.packages[name] = entry;
  const repository = typeof meta.repository === "object" ? meta.repository.url : meta.repository;
  const licence = ["LICENSE.md", "LICENSE", "LICENSE.txt"].map((f) => join(root, f)).find(existsSync);
  notices.push(`${name} ${meta.version} (${meta.license}) ${meta.homepage || repository || ""}\n` +
    (licence ? readFileSync(licence, "utf8").trim() + "\n"
      : `(the npm package ships no licence file; its package.json says ${meta.license})\n`));
}
writeFileSync(join(vendor, "LICENSES.txt"), notices.join("\n"));
writeFileSync(join(vendor, "manifest.json"), JSON.stringify(manifest, null, 2) + "\n");
