// Package finetune fits the parameters a linear-attention conversion
// inserted so that the converted model reproduces the original model's
// attention, by distillation on unlabeled calibration inputs, without an
// external training framework.
//
// Linformer fits each layer's projections E and F: the original model is
// run once to capture every attention core's exact output Y; then, layer by
// layer in graph order, the converted model is run (with the layers before
// already fitted) to capture the LinformerAttention node's inputs Q, K, V
// and key bias, and E, F minimise the relative squared error
//
//	L = Σ ‖out − Y‖² / Σ ‖Y‖²,  out = softmax(scale·Q·(E·K)ᵀ)·(F·V),
//
// over the real (unpadded) query rows, by full-batch Adam with analytic
// gradients of the attention core:
//
//	dVp = Aᵀ·dO, dA = dO·Vpᵀ, dZ = A ⊙ (dA − rowsum(A ⊙ dA)),
//	dKp = scale·dZᵀ·Q, dE = dKp·Kᵀ, dF = dVp·Vᵀ.
//
// Only the columns E[:, :, :S] that calibration inputs of length S reach
// are trained; calibrate with inputs as long as those the model will see.
package finetune
