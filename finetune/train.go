package finetune

import "math/rand/v2"

// This file holds the training loop every fit shares (adamLoop: Adam
// steps, checkpoints, keeping the best parameters, early stopping) and
// its use by the projection fits with their held-out rows (fitAdamTrace).

// adamTrace is what one run of the training loop did.
type adamTrace struct {
	trainBefore, trainAfter float64 // loss on the training rows at the start and at the kept parameters
	heldBefore, heldAfter   float64 // loss on the held-out rows (0 without any)
	steps                   int     // Adam steps run (fewer than Options.Steps when stopped early)
	kept                    int     // the step whose parameters were kept (0: the start)
}

// fitAdamTrace is the training loop every fit shares. rows are batch-row
// indices (documents): train the rows gradients come from, held the rows
// held out (nil or empty: an unguarded fit). It runs Adam (Options.LR) for
// up to Options.Steps steps, each on a seeded (Options.Seed) mini-batch of
// Options.Batch of the train rows (all when 0); grad(rows) must add the
// gradient of the loss over those rows into grads, which are cleared
// before each step; loss(rows) returns the loss over rows (it is never
// passed nil). params (nil entries frozen) are updated in place.
//
// Every CheckpointEvery steps and at the last one it evaluates loss(held)
// and keeps the parameters of the lowest held-out loss seen, the start
// included, so a layer never ends worse on the held-out rows than it
// began; after Options.Patience checkpoints (DefaultPatience when 0, never
// when negative) without a lower held-out loss it stops. Held-out rows
// never reach grad. Without held rows the criterion is loss(train) and
// every step runs. It returns the losses on the train and held rows at
// the start and at the parameters it leaves in params (the held ones 0
// without held rows), the steps it ran and the one it kept.
func fitAdamTrace(opt Options, train, held []int, params, grads [][]float64, loss func(rows []int) float64, grad func(rows []int)) adamTrace {
	rng := rand.New(rand.NewPCG(opt.Seed, 0x5eed))
	var tr adamTrace
	tr.trainBefore = loss(train)
	// Unguarded, the criterion is the training loss and every step runs.
	judged, start, patience := train, tr.trainBefore, 0
	guarded := len(held) > 0
	if guarded {
		tr.heldBefore = loss(held)
		judged, start, patience = held, tr.heldBefore, opt.patience()
	}
	draw := func() []int {
		pick := minibatch(rng, len(train), opt.Batch)
		if pick == nil {
			return train
		}
		rows := make([]int, len(pick))
		for i, j := range pick {
			rows[i] = train[j]
		}
		return rows
	}
	loop := adamLoop{steps: opt.Steps, every: CheckpointEvery, patience: patience, lr: opt.LR}
	var best float64
	tr.steps, tr.kept, best = loop.run(params, grads, start, draw, grad, func() float64 { return loss(judged) })
	switch {
	case !guarded:
		tr.trainAfter = best
	case tr.kept == 0:
		tr.trainAfter, tr.heldAfter = tr.trainBefore, best
	default:
		tr.trainAfter, tr.heldAfter = loss(train), best
	}
	return tr
}

// adamLoop is the loop of Adam steps every fit shares (fitAdamTrace, and
// each head of Transfer): up to steps steps of learning rate lr, a
// checkpoint every every steps and at the last one, and a stop after
// patience checkpoints without a lower criterion (0: never).
type adamLoop struct {
	steps, every, patience int
	lr                     float64
}

// run updates params (nil entries frozen) in place: each step takes the
// rows draw gives, clears grads, lets grad add the gradient over those
// rows into grads and takes an Adam step. At each checkpoint it evaluates
// criterion and keeps the parameters of its lowest value seen, start (its
// value at the parameters given) included; it leaves those in params and
// returns the steps it ran, the step kept (0: the start) and its
// criterion.
func (l adamLoop) run(params, grads [][]float64, start float64, draw func() []int, grad func(rows []int), criterion func() float64) (steps, kept int, best float64) {
	ad := newAdam(params, l.lr)
	best, bestP := start, snapshot(params)
	since := 0
	for t := 1; t <= l.steps; t++ {
		rows := draw()
		for _, x := range grads {
			clear(x)
		}
		grad(rows)
		ad.step(grads)
		steps = t
		if t%l.every != 0 && t != l.steps {
			continue
		}
		if c := criterion(); c < best {
			best, bestP, kept, since = c, snapshot(params), t, 0
		} else if since++; l.patience > 0 && since >= l.patience {
			break
		}
	}
	restore(params, bestP)
	return steps, kept, best
}

func snapshot(ps [][]float64) [][]float64 {
	out := make([][]float64, len(ps))
	for i, p := range ps {
		out[i] = append([]float64(nil), p...)
	}
	return out
}

func restore(ps, from [][]float64) {
	for i := range ps {
		copy(ps[i], from[i])
	}
}
