:

a	torch.add":b

bb

outputoutput":a"
GraphModule