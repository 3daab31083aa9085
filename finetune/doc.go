// Package finetune fits the parameters a linear-attention conversion
// inserted (or feeds) so that the converted model reproduces the original
// model's attention, by distillation on unlabeled calibration inputs,
// without an external training framework.
//
// The original model is run once to capture every attention core's exact
// output Y (found with convert.Detect and matched to the converted nodes by
// their head-merged output). Then, layer by layer in graph order, the
// converted model is run (with the layers before already fitted) to
// capture the converted node's inputs, and the layer's parameters
// minimise the relative squared error
//
//	L = Σ ‖out − Y‖² / Σ ‖Y‖²
//
// over the real (unpadded) query rows, by Adam on seeded mini-batches of
// calibration rows with analytic gradients in float64.
//
// Every fit is guarded by held-out documents. The calibration batch rows
// are documents; a seeded quarter of them (Options.HeldOut,
// Options.HeldOutFraction) is held out: those rows never contribute to a
// gradient. Every CheckpointEvery steps each layer's loss on the held-out
// rows is measured; the layer keeps the parameters of the lowest one, its
// start included (so no layer ends worse on them than it began), and stops
// after Options.Patience checkpoints without a lower one. After the last
// layer the converted and the fitted model are run on the held-out rows
// and compared with the original on its first output with a token axis
// (relative error and mean-pooled cosine); unless the fitted model is
// better on both (a lower error, a cosine no lower), the fit returns the
// converted model's parameters unchanged and says so (Report.Kept,
// Report.HeldOut). A batch of one row has nothing to hold out and is
// fitted unguarded (Report.Unguarded), as is any fit with
// Options.Unguarded.
//
// Linformer fits E and F (per head or shared, or E = F), with
// out = softmax(scale·Q·(E·K)ᵀ)·(F·V):
//
//	dVp = Aᵀ·dO, dA = dO·Vpᵀ, dZ = A ⊙ (dA − rowsum(A ⊙ dA)),
//	dKp = scale·dZᵀ·Q, dE = dKp·Kᵀ, dF = dVp·Vᵀ.
//
// Only the columns E[:, :, :S] that calibration inputs of length S reach
// are trained; calibrate with inputs as long as those the model will see.
// Projections shared by several layers ("layerwise") are fitted once on
// the sum of those layers' losses (gradients accumulated over layers).
//
// Performer keeps ω frozen and fits the projection weights and biases
// that produce Q and K (Q = heads(X·WQ + bQ), found by walking back from
// the node through Transpose/Reshape/Add/MatMul and checked numerically
// against the captured Q and K), with the positive features
// φ(x) = exp(Ω·x̃ − ‖x̃‖²/2 − c)/√M, x̃ = √scale·x, and
// out_i = φ(q_i)·(φ(K)ᵀV) / (φ(q_i)·φ(K)ᵀ1 + ε). The stabilising maxima c
// are treated as constants (they cancel in the ratio up to ε):
//
//	dnum = dO/den, dden = −rowsum(dO ⊙ out)/den,
//	dφ(Q) = dnum·(φ(K)ᵀV)ᵀ + dden·(φ(K)ᵀ1)ᵀ, dφ(K) = V·(φ(Q)ᵀdnum)ᵀ + 1·(φ(Q)ᵀdden)ᵀ,
//	du = dφ ⊙ φ, dx = √scale·(du·Ω − rowsum(du)·x̃), dW = Xᵀ·dX, db = Σ dX.
//
// Gradients of both are checked against finite differences in the tests.
//
// Transfer is the other kind of fit: it trains the feature maps of
// HedgehogAttention nodes (convert.ToHedgehog) by attention transfer.
// The teacher is the converted model with every such node made exact,
// run once per group of layers to capture each node's Q, K, V and exact
// output on calibration windows cut from whole documents
// (DocumentWindows); each head's maps then minimise either the relative
// error of its attention output or the cross-entropy of its attention
// weights (TransferOptions.Objective), by Adam on float32 matrix products,
// heads in parallel, from a line search of the far field's mass, keeping
// the parameters of the lowest error on held-out documents. Writing
// w_ij = ẽ_i·φ̃_k(k_j) for a far key, both gradients reduce to products of
// the exponentiated feature matrices (transfer_head.go); the tests check
// them against central differences of a float64 definition.
//
// The calibrated conversions are one call each, conversion and fit:
// TrainHedgehog (convert.ToHedgehog, then Transfer on windows cut from
// calibration documents: `convert hedgehog`), TrainLong (convert.ToLong
// with learned maps, then Transfer on rows framed window by window:
// `convert long --learned`) and CalibratedPerformer (PerformerMoments on
// the original model, then convert.ToPerformer with FAVOR# maps or the
// balance fitted to them: `convert performer --calibration`).
//
// Fitting a real model takes minutes; Options.Progress and
// TransferOptions.Progress, when set, get one line per fitted layer (its
// errors before and after on the rows trained on and held out, the step
// kept, the time elapsed and an estimate of the time left), and
// MomentOptions.Progress one line per run of the original model.
//
// The files: options.go and report.go hold the options and reports of
// every fit; adam.go the optimiser; train.go the training loop they share
// (adamLoop: steps, checkpoints, the parameters kept, early stopping);
// sampler.go the mini-batch and evaluation rows; heldout.go the held-out
// split and the whole-model check; target.go the converted nodes paired
// with the original blocks; capture.go running a model once and reading
// its values; projfit.go what the projection fits share; linformer.go,
// performer.go and localpooled.go one projection fit each; fit.go Fit;
// transfer.go and transfer_head.go attention transfer; documents.go the
// calibration windows; balance.go the Performer moments; calibrated.go
// the calibrated conversions.
package finetune
