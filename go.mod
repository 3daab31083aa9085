module github.com/linearize/linearize

go 1.26

require (
	github.com/yalue/onnxruntime_go v1.27.0 // indirect
	golang.org/x/text v0.31.0 // indirect
	gonum.org/v1/gonum v0.17.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
