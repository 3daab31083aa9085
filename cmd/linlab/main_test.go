package main

import "github.com/linearize/linearize/cmd/internal/cli/clitest"

// runCLI runs linlab in-process.
var runCLI = clitest.Run

// needORT skips the test when onnxruntime cannot be loaded.
var needORT = clitest.NeedORT
