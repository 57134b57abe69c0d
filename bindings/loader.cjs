// loader.cjs: loads the compiled addon (build/Release/maporl.node, else prebuilds/<platform>-<arch>/).
"use strict";
const path = require("node:path");
module.exports = require("node-gyp-build")(path.join(__dirname, ".."));
