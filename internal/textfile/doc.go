// Package textfile reads the text files that convert's commands take as
// calibration and held-out inputs: one text (a sentence or a whole
// document) per line.
package textfile
