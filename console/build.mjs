// Copies the browser builds of the console's libraries (pinned in package-lock.json, installed by
// `npm ci`) into the Python package, where inferd serves them at /console/vendor/. Run by
// `make install`; nothing is fetched by the server or the browser at run time.
import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const vendor = join(here, "..", "src", "inferd", "console", "static", "vendor");

// package -> [file in the package, name under vendor/]
const files = {
  alpinejs: [["dist/cdn.min.js", "alpine.min.js"]],
  "chart.js": [["dist/chart.umd.min.js", "chart.umd.min.js"]],
};

rmSync(vendor, { recursive: true, force: true });
mkdirSync(vendor, { recursive: true });
const notices = [];
for (const [name, copies] of Object.entries(files)) {
  const root = join(here, "node_modules", name);
  const meta = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
  for (const [source, target] of copies) {
    copyFileSync(join(root, source), join(vendor, target));
    console.log(`vendor/${target} <- ${name}@${meta.version}/${source}`);
  }
  const licence = ["LICENSE.md", "LICENSE", "LICENSE.txt"].map((f) => join(root, f)).find(existsSync);
  notices.push(`${name} ${meta.version} (${meta.license}) ${meta.homepage || ""}\n` +
    (licence ? readFileSync(licence, "utf8").trim() + "\n" : ""));
}
writeFileSync(join(vendor, "LICENSES.txt"), notices.join("\n"));
