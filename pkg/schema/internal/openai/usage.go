package openai

import (
	"strconv"

	"github.com/codeinterp/codeinterp/pkg/schema/internal/jsonscan"

	"github.com/tidwall/gjson"
)

// FinalUsage returns the sum of all rounds' usage (the body views), or nil with one round or
// when no round has a usage object.
func FinalUsage(views []string) []byte {
	if len(views) < 2 {
		return nil
	}
	usages := make([]gjson.Result, 0, len(views))
	for _, v := range views {
		if u := gjson.Get(v, "usage"); u.IsObject() {
			usages = append(usages, u)
		}
	}
	if len(usages) == 0 {
		return nil
	}
	return SumJSON(nil, usages)
}

// SumJSON appends the sum of vals (the values found at one path in each round, in
// chronological order) to dst. Objects are merged key by key: the last object's keys first in
// its order, then keys only earlier objects have. Numbers are added. Any other value (string,
// bool, null, array) is taken from the last round that has it. At a path where some rounds have
// an object and others another kind of value, the objects win; likewise numbers win over
// non-numbers.
func SumJSON(dst []byte, vals []gjson.Result) []byte {
	var objs []gjson.Result
	for _, v := range vals {
		if v.IsObject() {
			objs = append(objs, v)
		}
	}
	if len(objs) > 0 {
		return finalSumObjects(dst, objs)
	}
	var nums []gjson.Result
	for _, v := range vals {
		if v.Type == gjson.Number {
			nums = append(nums, v)
		}
	}
	if len(nums) > 0 {
		return finalSumNumbers(dst, nums)
	}
	return append(dst, vals[len(vals)-1].Raw...)
}

func finalSumObjects(dst []byte, objs []gjson.Result) []byte {
	index := make(map[string]int)
	var keys []string
	var children [][]gjson.Result
	add := func(k string) int {
		i, ok := index[k]
		if !ok {
			i = len(keys)
			index[k] = i
			keys = append(keys, k)
			children = append(children, nil)
		}
		return i
	}
	objs[len(objs)-1].ForEach(func(k, _ gjson.Result) bool {
		add(k.String())
		return true
	})
	for _, o := range objs {
		o.ForEach(func(k, v gjson.Result) bool {
			i := add(k.String())
			children[i] = append(children[i], v)
			return true
		})
	}
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = jsonscan.AppendString(dst, k)
		dst = append(dst, ':')
		dst = SumJSON(dst, children[i])
	}
	return append(dst, '}')
}

// finalSumNumbers adds JSON numbers: exactly as integers when they all are, else as floats.
func finalSumNumbers(dst []byte, nums []gjson.Result) []byte {
	var sum int64
	exact := true
	for _, n := range nums {
		v, err := strconv.ParseInt(n.Raw, 10, 64)
		if err != nil || (v > 0 && sum > (1<<63-1)-v) || (v < 0 && sum < (-1<<63)-v) {
			exact = false
			break
		}
		sum += v
	}
	if exact {
		return strconv.AppendInt(dst, sum, 10)
	}
	var f float64
	for _, n := range nums {
		f += n.Float()
	}
	return strconv.AppendFloat(dst, f, 'g', -1, 64)
}
